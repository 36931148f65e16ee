#include "common/status.h"

#include <memory>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace eft {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_TRUE(Status::Ok().ok());
}

TEST(StatusTest, FactoriesSetTheirCodes) {
  struct Case {
    Status status;
    StatusCode code;
    const char* name;
  };
  const Case cases[] = {
      {Status::InvalidArgument("m"), StatusCode::kInvalidArgument, "INVALID_ARGUMENT"},
      {Status::NotFound("m"), StatusCode::kNotFound, "NOT_FOUND"},
      {Status::AlreadyExists("m"), StatusCode::kAlreadyExists, "ALREADY_EXISTS"},
      {Status::FailedPrecondition("m"), StatusCode::kFailedPrecondition, "FAILED_PRECONDITION"},
      {Status::PermissionDenied("m"), StatusCode::kPermissionDenied, "PERMISSION_DENIED"},
      {Status::Unauthenticated("m"), StatusCode::kUnauthenticated, "UNAUTHENTICATED"},
      {Status::Unavailable("m"), StatusCode::kUnavailable, "UNAVAILABLE"},
      {Status::Internal("m"), StatusCode::kInternal, "INTERNAL"},
      {Status::DataLoss("m"), StatusCode::kDataLoss, "DATA_LOSS"},
      {Status::IoError("m"), StatusCode::kInternal, "INTERNAL"},  // gRPC has no I/O code
      {Status::Unimplemented("m"), StatusCode::kUnimplemented, "UNIMPLEMENTED"},
      {Status::ResourceExhausted("m"), StatusCode::kResourceExhausted, "RESOURCE_EXHAUSTED"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_FALSE(c.status.ok());
    EXPECT_EQ(c.status.code(), c.code);
    EXPECT_EQ(c.status.message(), "m");
    EXPECT_EQ(c.status.ToString(), std::string(c.name) + ": m");
  }
}

TEST(StatusTest, CodesMatchGrpcNumbering) {
  // The controller maps codes onto gRPC statuses by number, so the numbers are part of the contract.
  EXPECT_EQ(static_cast<int>(StatusCode::kCancelled), 1);
  EXPECT_EQ(static_cast<int>(StatusCode::kInvalidArgument), 3);
  EXPECT_EQ(static_cast<int>(StatusCode::kNotFound), 5);
  EXPECT_EQ(static_cast<int>(StatusCode::kFailedPrecondition), 9);
  EXPECT_EQ(static_cast<int>(StatusCode::kUnavailable), 14);
  EXPECT_EQ(static_cast<int>(StatusCode::kUnauthenticated), 16);
}

TEST(StatusTest, EveryCodeHasADistinctName) {
  std::set<std::string> names;
  for (int c = 0; c <= 16; ++c) names.insert(StatusCodeName(static_cast<StatusCode>(c)));
  EXPECT_EQ(names.size(), 17u);
  EXPECT_STREQ(StatusCodeName(StatusCode::kOk), "OK");
  EXPECT_STREQ(StatusCodeName(StatusCode::kDeadlineExceeded), "DEADLINE_EXCEEDED");
  EXPECT_STREQ(StatusCodeName(StatusCode::kAborted), "ABORTED");
  EXPECT_STREQ(StatusCodeName(StatusCode::kOutOfRange), "OUT_OF_RANGE");
  EXPECT_STREQ(StatusCodeName(StatusCode::kUnknown), "UNKNOWN");
  EXPECT_STREQ(StatusCodeName(static_cast<StatusCode>(99)), "UNKNOWN");
}

TEST(StatusTest, ToStringAndStream) {
  Status s = Status::InvalidArgument("spec.resources.nodes.min must be >= 1");
  EXPECT_EQ(s.ToString(), "INVALID_ARGUMENT: spec.resources.nodes.min must be >= 1");
  std::ostringstream os;
  os << s;
  EXPECT_EQ(os.str(), s.ToString());
  Status custom(StatusCode::kAborted, "lost the race");
  EXPECT_EQ(custom.ToString(), "ABORTED: lost the race");
}

TEST(StatusTest, WithContextPrefixesAndKeepsCode) {
  Status s = Status::NotFound("no such table").WithContext("loading db");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "loading db: no such table");
  EXPECT_EQ(s.WithContext("starting").message(), "starting: loading db: no such table");
  // OK stays OK and gains no message.
  Status ok = Status::Ok().WithContext("loading db");
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.message(), "");
}

TEST(ResultTest, HoldsAValue) {
  Result<int> r = 7;
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.status().ok());
  EXPECT_EQ(r.value(), 7);
  EXPECT_EQ(*r, 7);
  *r = 8;
  EXPECT_EQ(r.value(), 8);

  Result<std::string> s = std::string("abc");
  EXPECT_EQ(s->size(), 3u);
  const Result<std::string>& cs = s;
  EXPECT_EQ(*cs, "abc");
  EXPECT_EQ(cs->front(), 'a');
}

TEST(ResultTest, HoldsAnError) {
  Result<int> r = Status::NotFound("job 7");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "job 7");
}

TEST(ResultTest, MoveOnlyValue) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(5);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 5);
}

Result<int> ParsePositive(int v) {
  if (v <= 0) return Status::InvalidArgument("not positive: " + std::to_string(v));
  return v;
}

Status Check(int v) { return v == 13 ? Status::FailedPrecondition("unlucky") : Status::Ok(); }

// Uses both macros twice, which also checks that their temporaries do not collide.
Result<int> SumOfTwo(int a, int b, int* reached) {
  *reached = 0;
  EFT_RETURN_IF_ERROR(Check(a));
  EFT_ASSIGN_OR_RETURN(int x, ParsePositive(a));
  *reached = 1;
  EFT_RETURN_IF_ERROR(Check(b));
  EFT_ASSIGN_OR_RETURN(int y, ParsePositive(b));
  *reached = 2;
  return x + y;
}

TEST(MacrosTest, PassValuesThrough) {
  int reached = -1;
  Result<int> r = SumOfTwo(2, 3, &reached);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, 5);
  EXPECT_EQ(reached, 2);
}

TEST(MacrosTest, ReturnTheFirstError) {
  int reached = -1;
  Result<int> r = SumOfTwo(-1, 3, &reached);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "not positive: -1");
  EXPECT_EQ(reached, 0);

  r = SumOfTwo(1, 13, &reached);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(reached, 1);

  r = SumOfTwo(1, 0, &reached);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reached, 1);
}

Status AssignExisting(std::unique_ptr<int>* out, bool fail) {
  auto make = [fail]() -> Result<std::unique_ptr<int>> {
    if (fail) return Status::Internal("boom");
    return std::make_unique<int>(9);
  };
  EFT_ASSIGN_OR_RETURN(*out, make());  // into an existing variable, moving a move-only value
  return Status::Ok();
}

TEST(MacrosTest, AssignIntoExistingVariable) {
  std::unique_ptr<int> p;
  ASSERT_TRUE(AssignExisting(&p, false).ok());
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 9);
  std::unique_ptr<int> q;
  Status s = AssignExisting(&q, true);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ(q, nullptr);
}

}  // namespace
}  // namespace eft
