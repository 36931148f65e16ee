// Where a rank learns who it is (trainer/train/launch.h): the names of the rank protocol
// (common/rank_protocol.h) from eft-worker or torchrun, Slurm's own, or none at all.
#include "trainer/train/launch.h"

#include <map>
#include <string>

#include <gtest/gtest.h>

#include "common/rank_protocol.h"

namespace eft::trainer {
namespace {

using Env = std::map<std::string, std::string>;
namespace names = rank::env;

TEST(RankEnvTest, NoVariablesIsASingleProcess) {
  Env env;
  auto r = RankEnvFromEnvironment(&env);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->source, "single process");
  EXPECT_EQ(r->rank, 0);
  EXPECT_EQ(r->world, 1);
  EXPECT_EQ(r->events_fd, -1);
}

TEST(RankEnvTest, ASingleProcessStillReadsEftsVariables) {
  Env env = {{names::kResumeFrom, "auto"}, {names::kEventsFd, "5"}, {names::kAttempt, "2"}};
  auto r = RankEnvFromEnvironment(&env);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->source, "single process");
  EXPECT_EQ(r->world, 1);
  EXPECT_EQ(r->resume_from, "auto");
  EXPECT_EQ(r->events_fd, 5);
  EXPECT_EQ(r->attempt, 2);
}

TEST(RankEnvTest, GpuCollectivesAreNcclUnlessGlooIsAskedFor) {
  Env env;
  EXPECT_EQ(RankEnvFromEnvironment(&env)->gpu_collectives, GpuCollectives::kNccl);
  for (const auto& [value, expected] : {std::pair{"nccl", GpuCollectives::kNccl}, {"", GpuCollectives::kNccl},
                                        {"gloo", GpuCollectives::kGlooStaged}}) {
    env["EFT_GPU_COLLECTIVES"] = value;
    auto r = RankEnvFromEnvironment(&env);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->gpu_collectives, expected) << value;
  }
  env["EFT_GPU_COLLECTIVES"] = "mpi";
  auto bad = RankEnvFromEnvironment(&env);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "EFT_GPU_COLLECTIVES=mpi is not one of nccl, gloo");
}

TEST(RankEnvTest, WhatTheWorkerSetsIsRead) {
  Env env = {{names::kRank, "3"},          {names::kWorldSize, "4"},      {names::kLocalRank, "1"},
             {names::kLocalWorldSize, "2"}, {names::kMasterAddr, "10.1.2.3"}, {names::kMasterPort, "29611"},
             {names::kJobId, "17"},         {names::kAttempt, "2"},        {names::kResumeFrom, "/ckpt/step-40"},
             {names::kEventsFd, "3"}};
  auto r = RankEnvFromEnvironment(&env);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->source, "eft-worker");
  EXPECT_EQ(r->rank, 3);
  EXPECT_EQ(r->world, 4);
  EXPECT_EQ(r->local_rank, 1);
  EXPECT_EQ(r->local_world, 2);
  EXPECT_EQ(r->master_addr, "10.1.2.3");
  EXPECT_EQ(r->master_port, 29611);
  EXPECT_EQ(r->job_id, "17");
  EXPECT_EQ(r->attempt, 2);
  EXPECT_EQ(r->resume_from, "/ckpt/step-40");
  EXPECT_EQ(r->events_fd, 3);
}

TEST(RankEnvTest, TorchrunsVariablesWithoutEftsAreTorchrun) {
  Env env = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1234"}};
  auto r = RankEnvFromEnvironment(&env);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->source, "torchrun");
  EXPECT_EQ(r->local_rank, 0);
  EXPECT_EQ(r->local_world, 1);
}

TEST(RankEnvTest, SlurmTasksFindTheirMasterInTheNodeList) {
  Env env = {{"SLURM_PROCID", "5"},
             {"SLURM_NTASKS", "8"},
             {"SLURM_LOCALID", "1"},
             {"SLURM_NTASKS_PER_NODE", "4(x2)"},
             {"SLURM_JOB_NODELIST", "gpu[03-05,07],cpu1"},
             {"MASTER_PORT", "29500"}};
  auto r = RankEnvFromEnvironment(&env);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->source, "slurm");
  EXPECT_EQ(r->rank, 5);
  EXPECT_EQ(r->world, 8);
  EXPECT_EQ(r->local_rank, 1);
  EXPECT_EQ(r->local_world, 4);
  EXPECT_EQ(r->master_addr, "gpu03");
}

TEST(RankEnvTest, BadValuesNameTheVariable) {
  const std::vector<std::pair<Env, std::string>> cases = {
      {{{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}, "RANK='4'"},
      {{{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}, "RANK='x'"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}, "MASTER_ADDR is not set"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}, "MASTER_PORT is not set"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}, "MASTER_PORT='70000'"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"EFT_EVENTS_FD", "-1"}}, "EFT_EVENTS_FD='-1'"},
  };
  for (const auto& [env, expected] : cases) {
    auto r = RankEnvFromEnvironment(&env);
    ASSERT_FALSE(r.ok()) << expected;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << expected;
    EXPECT_NE(r.status().message().find(expected), std::string::npos) << r.status();
  }
}

TEST(RankEnvTest, FirstSlurmHost) {
  EXPECT_EQ(FirstSlurmHost("node1"), "node1");
  EXPECT_EQ(FirstSlurmHost("node1,node2"), "node1");
  EXPECT_EQ(FirstSlurmHost("gpu[03-05,07],cpu1"), "gpu03");
  EXPECT_EQ(FirstSlurmHost("a1,gpu[2-3]"), "a1");
}

}  // namespace
}  // namespace eft::trainer
