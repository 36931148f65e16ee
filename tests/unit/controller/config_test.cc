#include "controller/config.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace eft::controller {
namespace {

std::string WriteTemp(const std::string& text) {
  std::string path = (std::filesystem::temp_directory_path() / ("eft-config-" + std::to_string(::getpid()) + ".yaml")).string();
  std::ofstream(path) << text;
  return path;
}

TEST(ControllerConfig, DefaultsAreTheDocumentedOnes) {
  ControllerConfig c;
  c.db_path = "/var/lib/eft/c.db";
  ASSERT_TRUE(FinalizeControllerConfig(&c).ok());
  EXPECT_EQ(c.heartbeat_interval.count(), 1000);
  EXPECT_EQ(c.heartbeat_timeout.count(), 3000);
  EXPECT_EQ(c.restart_backoff_max.count(), 30000);
  EXPECT_EQ(c.data_dir, "/var/lib/eft/c.db.d");
  EXPECT_EQ(c.max_submitter_priority, 0);
}

TEST(ControllerConfig, LoadsOverridesInSeconds) {
  ControllerConfig c;
  std::string path = WriteTemp("listen: 127.0.0.1:9000\nheartbeat_interval_s: 0.5\nheartbeat_timeout_s: 2\n"
                               "master_port_base: 40000\ndata_dir: /data\nmax_submitter_priority: -2\n");
  ASSERT_TRUE(LoadControllerConfig(path, &c).ok());
  EXPECT_EQ(c.listen, "127.0.0.1:9000");
  EXPECT_EQ(c.heartbeat_interval.count(), 500);
  EXPECT_EQ(c.heartbeat_timeout.count(), 2000);
  EXPECT_EQ(c.master_port_base, 40000);
  EXPECT_EQ(c.data_dir, "/data");
  EXPECT_EQ(c.max_submitter_priority, -2);
  std::filesystem::remove(path);
}

TEST(ControllerConfig, RejectsUnknownKeysWrongTypesAndBadRanges) {
  ControllerConfig c;
  std::string path = WriteTemp("heartbeat_timout_s: 2\n");
  Status s = LoadControllerConfig(path, &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unknown setting 'heartbeat_timout_s'"), std::string::npos) << s;
  path = WriteTemp("heartbeat_timeout_s: soon\n");
  s = LoadControllerConfig(path, &c);
  EXPECT_NE(s.message().find("heartbeat_timeout_s: expected a number of seconds"), std::string::npos) << s;
  std::filesystem::remove(path);

  ControllerConfig bad;
  bad.heartbeat_timeout = bad.heartbeat_interval;
  EXPECT_FALSE(FinalizeControllerConfig(&bad).ok());
  ControllerConfig ports;
  ports.master_port_base = 65000;
  ports.master_port_count = 1000;
  EXPECT_FALSE(FinalizeControllerConfig(&ports).ok());
}

TEST(ControllerConfig, AMasterPortRangeInTheEphemeralRangeIsWarnedAbout) {
  ControllerConfig c;  // 29500..31499
  const PortRange linux_default;  // 32768..60999
  EXPECT_EQ(MasterPortRangeWarning(c, linux_default), "") << "the defaults stay clear of Linux's default range";
  c.master_port_base = 61000;
  EXPECT_EQ(MasterPortRangeWarning(c, linux_default), "") << "above the range";
  c.master_port_base = 31000;  // 31000..32999: its last 232 ports inside
  EXPECT_EQ(MasterPortRangeWarning(c, linux_default),
            "MASTER_PORTs 31000..32999 (master_port_base, master_port_count) reach into the ephemeral port range "
            "32768..60999 (net.ipv4.ip_local_port_range), from which outgoing connections take their ports: an attempt "
            "whose port one holds is retried on the next port; keep the range below 32768");
  c.master_port_base = 29500;
  EXPECT_NE(MasterPortRangeWarning(c, PortRange{31499, 60999}), "") << "one port shared";
  EXPECT_EQ(MasterPortRangeWarning(c, PortRange{31500, 60999}), "");
}

}  // namespace
}  // namespace eft::controller
