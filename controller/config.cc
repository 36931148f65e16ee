#include "controller/config.h"

#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "common/yaml_json.h"

namespace eft::controller {
namespace {

using nlohmann::json;

Status ReadMillis(const json& v, const std::string& key, std::chrono::milliseconds* out) {
  // Durations are written in seconds (floats allowed), as every other duration users type.
  if (!v.is_number()) return Status::InvalidArgument(key + ": expected a number of seconds");
  double secs = v.get<double>();
  if (!(secs > 0)) return Status::InvalidArgument(key + ": must be > 0 seconds");
  *out = std::chrono::milliseconds(static_cast<long long>(secs * 1000 + 0.5));
  return Status::Ok();
}

Status ReadInt(const json& v, const std::string& key, int* out) {
  if (!v.is_number_integer()) return Status::InvalidArgument(key + ": expected an integer");
  *out = v.get<int>();
  return Status::Ok();
}

Status ReadBool(const json& v, const std::string& key, bool* out) {
  if (!v.is_boolean()) return Status::InvalidArgument(key + ": expected true or false");
  *out = v.get<bool>();
  return Status::Ok();
}

// "HOST:PORT" -> HOST ("[::1]:80" -> "::1"; ":80" -> ""). No validation beyond that.
std::string HostOf(const std::string& address) {
  size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

Status ReadString(const json& v, const std::string& key, std::string* out) {
  if (!v.is_string()) return Status::InvalidArgument(key + ": expected a string");
  *out = v.get<std::string>();
  return Status::Ok();
}

}  // namespace

Status LoadControllerConfig(const std::string& path, ControllerConfig* c) {
  EFT_ASSIGN_OR_RETURN(json doc, LoadYamlOrJsonFile(path));
  if (doc.is_null()) return Status::Ok();
  if (!doc.is_object()) return Status::InvalidArgument(path + ": expected a mapping of settings");
  using Reader = std::function<Status(const json&, const std::string&)>;
  const std::map<std::string, Reader> readers = {
      {"listen", [&](auto& v, auto& k) { return ReadString(v, k, &c->listen); }},
      {"db", [&](auto& v, auto& k) { return ReadString(v, k, &c->db_path); }},
      {"data_dir", [&](auto& v, auto& k) { return ReadString(v, k, &c->data_dir); }},
      {"heartbeat_interval_s", [&](auto& v, auto& k) { return ReadMillis(v, k, &c->heartbeat_interval); }},
      {"heartbeat_timeout_s", [&](auto& v, auto& k) { return ReadMillis(v, k, &c->heartbeat_timeout); }},
      {"tick_interval_s", [&](auto& v, auto& k) { return ReadMillis(v, k, &c->tick_interval); }},
      {"master_port_base", [&](auto& v, auto& k) { return ReadInt(v, k, &c->master_port_base); }},
      {"master_port_count", [&](auto& v, auto& k) { return ReadInt(v, k, &c->master_port_count); }},
      {"restart_backoff_initial_s", [&](auto& v, auto& k) { return ReadMillis(v, k, &c->restart_backoff_initial); }},
      {"restart_backoff_max_s", [&](auto& v, auto& k) { return ReadMillis(v, k, &c->restart_backoff_max); }},
      {"stop_report_slack_s", [&](auto& v, auto& k) { return ReadMillis(v, k, &c->stop_report_slack); }},
      {"trainer_program", [&](auto& v, auto& k) { return ReadString(v, k, &c->trainer_program); }},
      {"auth_tokens", [&](auto& v, auto& k) { return ReadString(v, k, &c->auth_tokens_file); }},
      {"join_token_file", [&](auto& v, auto& k) { return ReadString(v, k, &c->join_token_file); }},
      {"tls_cert", [&](auto& v, auto& k) { return ReadString(v, k, &c->tls_cert); }},
      {"tls_key", [&](auto& v, auto& k) { return ReadString(v, k, &c->tls_key); }},
      {"tls_client_ca", [&](auto& v, auto& k) { return ReadString(v, k, &c->tls_client_ca); }},
      {"insecure_listen_anywhere", [&](auto& v, auto& k) { return ReadBool(v, k, &c->insecure_listen_anywhere); }},
      {"metrics_without_auth", [&](auto& v, auto& k) { return ReadBool(v, k, &c->metrics_without_auth); }},
  };
  for (const auto& [key, value] : doc.items()) {
    auto it = readers.find(key);
    if (it == readers.end()) {
      std::string known;
      for (const auto& [k, _] : readers) known += (known.empty() ? "" : ", ") + k;
      return Status::InvalidArgument(path + ": unknown setting '" + key + "' (known: " + known + ")");
    }
    EFT_RETURN_IF_ERROR(it->second(value, key).WithContext(path));
  }
  return Status::Ok();
}

bool IsLoopbackHost(const std::string& host) {
  return host.rfind("127.", 0) == 0 || host == "::1" || host == "localhost" || host == "ip6-localhost";
}

Status CheckListenSecurity(const ControllerConfig& c, const std::string& http_address) {
  if (c.auth_tokens_file.empty() != c.join_token_file.empty()) {
    return Status::InvalidArgument(
        "authentication needs both --auth-tokens (users) and --join-token-file (workers); one without the other "
        "would leave the users' or the workers' API open");
  }
  if (c.tls_cert.empty() != c.tls_key.empty()) {
    return Status::InvalidArgument("TLS needs both --tls-cert and --tls-key");
  }
  if (!c.tls_client_ca.empty() && c.tls_cert.empty()) {
    return Status::InvalidArgument("--tls-client-ca needs --tls-cert and --tls-key");
  }
  if (c.auth_enabled() || c.insecure_listen_anywhere) return Status::Ok();
  std::vector<std::pair<std::string, std::string>> addresses = {{"--listen", c.listen.empty() ? "127.0.0.1:7070" : c.listen}};
  if (!http_address.empty()) addresses.emplace_back("--http", http_address);
  for (const auto& [flag, address] : addresses) {
    if (!IsLoopbackHost(HostOf(address))) {
      return Status::InvalidArgument(flag + " " + address +
                                     ": without authentication the controller listens on loopback addresses only "
                                     "(127.0.0.1, ::1); configure --auth-tokens and --join-token-file (docs/auth.md), "
                                     "or pass --insecure-listen-anywhere to accept anyone who can reach it");
    }
  }
  return Status::Ok();
}

Status FinalizeControllerConfig(ControllerConfig* c) {
  if (c->db_path.empty()) return Status::InvalidArgument("db: must not be empty");
  if (c->listen.empty()) {
    c->listen = c->auth_enabled() || c->insecure_listen_anywhere ? "0.0.0.0:7070" : "127.0.0.1:7070";
  }
  if (c->data_dir.empty()) c->data_dir = c->db_path + ".d";
  if (c->heartbeat_timeout <= c->heartbeat_interval) {
    return Status::InvalidArgument("heartbeat_timeout_s must be greater than heartbeat_interval_s");
  }
  if (c->master_port_base < 1024 || c->master_port_count < 1 || c->master_port_base + c->master_port_count > 65536) {
    return Status::InvalidArgument("master_port_base/master_port_count must describe a range within 1024..65535");
  }
  if (c->restart_backoff_max < c->restart_backoff_initial) {
    return Status::InvalidArgument("restart_backoff_max_s must be >= restart_backoff_initial_s");
  }
  return Status::Ok();
}

}  // namespace eft::controller
