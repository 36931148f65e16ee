// Request-target parsing for the REST API: percent-decoding, UTF-8 checks, verbs, queries, routing.
#include <gtest/gtest.h>

#include "common/http/router.h"
#include "common/http/url.h"

namespace eft::http {
namespace {

TEST(RestUrl, PercentDecode) {
  EXPECT_EQ(*PercentDecode("a%20b%2Fc", false), "a b/c");
  EXPECT_EQ(*PercentDecode("a+b", false), "a+b");
  EXPECT_EQ(*PercentDecode("a+b", true), "a b");
  EXPECT_EQ(*PercentDecode("%e2%82%AC", false), "\xe2\x82\xac");
  for (const char* bad : {"%", "%4", "%zz", "a%g0", "%%"}) {
    auto r = PercentDecode(bad, false);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("percent-encoding"), std::string::npos) << r.status();
  }
}

TEST(RestUrl, Utf8Validation) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xff"));
  EXPECT_FALSE(IsValidUtf8("\x80"));                  // stray continuation byte
  EXPECT_FALSE(IsValidUtf8("\xc3"));                  // truncated
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));              // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xe0\x80\xaf"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));          // surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));      // past U+10FFFF
  EXPECT_TRUE(IsPrintableUtf8("node-1"));
  EXPECT_FALSE(IsPrintableUtf8(std::string("a\0b", 3)));
  EXPECT_FALSE(IsPrintableUtf8("a\nb"));
  EXPECT_FALSE(IsPrintableUtf8("a\x7f"));
}

TEST(RestUrl, ParseTargetSplitsDecodesAndKeepsEncodedSeparatorsInside) {
  auto t = ParseTarget("/v1/nodes/..%2F..:drain");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->segments, (std::vector<std::string>{"v1", "nodes", "../.."}));
  EXPECT_EQ(t->verb, "drain");

  t = ParseTarget("/v1/nodes/a%3Ab:undrain");  // an encoded ':' belongs to the name
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->segments.back(), "a:b");
  EXPECT_EQ(t->verb, "undrain");

  t = ParseTarget("/");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->segments.empty());

  t = ParseTarget("/v1/jobs?state=RUNNING&state=queued&pageToken=a%2Bb&x=1+2&&flag");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->segments, (std::vector<std::string>{"v1", "jobs"}));
  ASSERT_EQ(t->query.size(), 5u);
  EXPECT_EQ(t->query[0], (std::pair<std::string, std::string>{"state", "RUNNING"}));
  EXPECT_EQ(t->query[1].second, "queued");
  EXPECT_EQ(t->query[2].second, "a+b");
  EXPECT_EQ(t->query[3].second, "1 2");
  EXPECT_EQ(t->query[4], (std::pair<std::string, std::string>{"flag", ""}));

  t = ParseTarget("/v1/jobs/");  // trailing slash: an empty last segment, which no route matches
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->segments, (std::vector<std::string>{"v1", "jobs", ""}));
}

TEST(RestUrl, ParseTargetRejectsWhatCannotBeAName) {
  for (const char* bad : {"", "v1/jobs", "http://host/v1/jobs", "*", "/v1/jobs/%ff", "/v1/jobs/%00",
                          "/v1/jobs/a%0Ab", "/v1/jobs/%zz", "/v1/jobs?state=%ff", "/v1/jobs?%c0%af=1",
                          "/v1/nodes/x:%ff", "/v1/jobs?x=%"}) {
    auto t = ParseTarget(bad);
    EXPECT_FALSE(t.ok()) << bad;
    if (!t.ok()) {
      EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

HttpReply Named(const std::string& name) {
  HttpReply r;
  r.body = name;
  return r;
}

TEST(RestRouter, MatchesPatternsVerbsAndTellsWrongMethodFromNoRoute) {
  Router router;
  router.Add("GET", "/v1/jobs", [](const RouteContext&) { return Named("list"); });
  router.Add("POST", "/v1/jobs", [](const RouteContext&) { return Named("submit"); });
  router.Add("GET", "/v1/jobs/{id}", [](const RouteContext& c) { return Named("get " + c.params.at("id")); });
  router.Add("POST", "/v1/jobs/{id}:cancel", [](const RouteContext& c) { return Named("cancel " + c.params.at("id")); });
  router.Add("GET", "/v1/jobs/{id}/logs", [](const RouteContext& c) { return Named("logs " + c.params.at("id")); });

  auto call = [&](const std::string& method, const std::string& target) {
    auto t = ParseTarget(target);
    EXPECT_TRUE(t.ok());
    Router::Match m = router.Find(method, *t);
    if (m.kind != Router::Match::kFound) return std::string(m.kind == Router::Match::kNoRoute ? "404" : "405");
    HttpRequest req;
    return (*m.handler)(RouteContext{req, *t, m.params}).body;
  };
  EXPECT_EQ(call("GET", "/v1/jobs"), "list");
  EXPECT_EQ(call("POST", "/v1/jobs"), "submit");
  EXPECT_EQ(call("GET", "/v1/jobs/17"), "get 17");
  EXPECT_EQ(call("GET", "/v1/jobs/a%2Fb"), "get a/b");
  EXPECT_EQ(call("POST", "/v1/jobs/17:cancel"), "cancel 17");
  EXPECT_EQ(call("GET", "/v1/jobs/17/logs"), "logs 17");
  EXPECT_EQ(call("GET", "/v1/jobs/17:cancel"), "405");
  EXPECT_EQ(call("DELETE", "/v1/jobs"), "405");
  EXPECT_EQ(call("GET", "/v1/jobs/17:frobnicate"), "404");
  EXPECT_EQ(call("GET", "/v1/jobs/:cancel"), "404") << "an empty id is no id";
  EXPECT_EQ(call("GET", "/v1/jobs/"), "404");
  EXPECT_EQ(call("GET", "/v1/jobs/17/logs/x"), "404");
  EXPECT_EQ(call("GET", "/v1/jobs/../jobs"), "404") << "dot segments are not collapsed";
  EXPECT_EQ(call("GET", "/v2/jobs"), "404");

  auto t = ParseTarget("/v1/jobs");
  Router::Match m = router.Find("PUT", *t);
  EXPECT_EQ(m.kind, Router::Match::kWrongMethod);
  EXPECT_EQ(m.allowed, (std::vector<std::string>{"GET", "POST"}));
  EXPECT_EQ(m.pattern, "/v1/jobs");
}

}  // namespace
}  // namespace eft::http
