#include "common/daemon_settings.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <gtest/gtest.h>

namespace eft {
namespace {

// A daemon with one setting of every kind, parsed from argv like a real main.
class DaemonSettingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "eft-settings-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    settings_.AddString({"listen", "--listen", "address"}, &listen_);
    settings_.AddString({"work_dir", "--work-dir", "directory"}, &work_dir_);
    settings_.AddString({"data_dir", "", ""}, &data_dir_);  // file only
    settings_.AddString({"", "--http", "flag only"}, &http_);
    settings_.AddInt({"slots", "--slots", "slots"}, &slots_);
    settings_.AddBool({"tls", "--tls", "switch"}, &tls_);
    settings_.AddSeconds({"heartbeat_interval_s", "--heartbeat-interval", "seconds"}, &interval_);
    settings_.AddChoice({"log_level", "--log-level", "level"}, {"debug", "info"}, &log_level_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& yaml) {
    std::string path = dir_ + "/settings.yaml";
    std::ofstream(path) << yaml;
    return path;
  }
  // Parses the flags (CLI11 errors fail the test) and applies; returns Apply's status.
  Status Parse(std::vector<std::string> args) {
    args.insert(args.begin(), "daemon");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    try {
      app_.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::ParseError& e) {
      ADD_FAILURE() << "CLI11 refused the flags: " << e.what();
      return Status::InvalidArgument(e.what());
    }
    return settings_.Apply();
  }

  std::string dir_;
  CLI::App app_{"test daemon"};
  DaemonSettings settings_{&app_, "settings file"};
  std::string listen_ = "default:1", work_dir_ = "/default", data_dir_, http_, log_level_;
  int slots_ = 0;
  bool tls_ = false;
  std::chrono::milliseconds interval_{1000};
};

TEST_F(DaemonSettingsTest, DefaultsStayWithoutFileOrFlags) {
  ASSERT_TRUE(Parse({}).ok());
  EXPECT_EQ(listen_, "default:1");
  EXPECT_EQ(slots_, 0);
  EXPECT_EQ(interval_.count(), 1000);
}

TEST_F(DaemonSettingsTest, FlagsWinOverTheFileAndTheFileOverDefaults) {
  std::string path = Write("listen: file:2\nwork_dir: /file\nslots: 4\ntls: true\nheartbeat_interval_s: 0.25\n"
                           "data_dir: /data\nlog_level: debug\n");
  ASSERT_TRUE(Parse({"--config", path, "--listen", "flag:3", "--slots", "8"}).ok());
  EXPECT_EQ(listen_, "flag:3");
  EXPECT_EQ(slots_, 8);
  EXPECT_EQ(work_dir_, "/file");
  EXPECT_EQ(data_dir_, "/data");
  EXPECT_TRUE(tls_);
  EXPECT_EQ(interval_.count(), 250);
  EXPECT_EQ(log_level_, "debug");
  EXPECT_EQ(settings_.config_path(), path);
}

TEST_F(DaemonSettingsTest, FlagsAloneAndSecondsFromFlags) {
  ASSERT_TRUE(Parse({"--http", "127.0.0.1:8080", "--tls", "--heartbeat-interval", "1.5"}).ok());
  EXPECT_EQ(http_, "127.0.0.1:8080");
  EXPECT_TRUE(tls_);
  EXPECT_EQ(interval_.count(), 1500);
}

TEST_F(DaemonSettingsTest, UnknownKeyNamesItAndTheKnownOnes) {
  std::string path = Write("listne: x\n");
  Status s = Parse({"--config", path});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), path + ": unknown setting 'listne' (known: data_dir, heartbeat_interval_s, listen, "
                                "log_level, slots, tls, work_dir)");
  // A flag-only setting has no key.
  EXPECT_FALSE(settings_.ApplyFile(Write("http: x\n")).ok());
}

TEST_F(DaemonSettingsTest, WrongTypesNameTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"slots: many\n", "slots: expected an integer"},
      {"tls: yes please\n", "tls: expected true or false"},
      {"listen: 7\n", "listen: expected a string"},
      {"heartbeat_interval_s: soon\n", "heartbeat_interval_s: expected a number of seconds"},
      {"heartbeat_interval_s: 0\n", "heartbeat_interval_s: must be > 0 seconds"},
      {"log_level: loud\n", "log_level: expected one of debug, info"},
  };
  for (const auto& [yaml, message] : cases) {
    std::string path = Write(yaml);
    Status s = settings_.ApplyFile(path);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << yaml;
    EXPECT_EQ(s.message(), path + ": " + message) << yaml;
  }
  EXPECT_EQ(settings_.ApplyFile(Write("- a\n- b\n")).message(), dir_ + "/settings.yaml: expected a mapping of settings");
}

TEST_F(DaemonSettingsTest, DashedKeysAndEmptyValues) {
  ASSERT_TRUE(settings_.ApplyFile(Write("work-dir: /dashed\nlisten:\n")).ok());
  EXPECT_EQ(work_dir_, "/dashed");
  EXPECT_EQ(listen_, "default:1") << "`listen:` without a value keeps the default";
  ASSERT_TRUE(settings_.ApplyFile(Write("")).ok()) << "an empty file sets nothing";
}

TEST_F(DaemonSettingsTest, MissingFileNamesIt) {
  Status s = settings_.ApplyFile(dir_ + "/missing.yaml");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find(dir_ + "/missing.yaml"), std::string::npos) << s;
}

TEST(DaemonSettingsRequired, EitherTheFlagOrTheFileGivesIt) {
  std::string controller;
  CLI::App app{"worker"};
  DaemonSettings settings(&app, "file");
  settings.AddString({"controller", "--controller", "address", /*required=*/true}, &controller);
  char name[] = "worker";
  char* argv[] = {name};
  app.parse(1, argv);
  Status s = settings.Apply();
  EXPECT_EQ(s.message(), "--controller is required (or `controller:` in --config)");

  std::string path = (std::filesystem::temp_directory_path() / ("eft-settings-" + std::to_string(::getpid()))).string();
  std::ofstream(path) << "controller: c:1\n";
  CLI::App app2{"worker"};
  DaemonSettings settings2(&app2, "file");
  settings2.AddString({"controller", "--controller", "address", /*required=*/true}, &controller);
  std::string config_flag = "--config";
  char* argv2[] = {name, config_flag.data(), path.data()};
  app2.parse(3, argv2);
  EXPECT_TRUE(settings2.Apply().ok());
  EXPECT_EQ(controller, "c:1");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace eft
