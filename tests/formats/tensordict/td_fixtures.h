// tests/formats/tensordict/td_fixtures.h: scratch folders, hand-written tensordict fixtures and
// small Document builders shared by the tensordict tests. Each test gets its own folder under
// the system temp dir, removed afterwards. Single-threaded (one test at a time).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "expect_error.h"
#include "trove/document.h"
#include "trove/error.h"
#include "trove/tensordict.h"

namespace trove::tdtest {

namespace fs = std::filesystem;
using trove::ExpectError;

class TdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "trove-td-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  std::string P(const std::string& rel) const { return (fs::path(root_) / rel).string(); }

  void Write(const std::string& rel, const std::string& bytes) const {
    fs::create_directories(fs::path(P(rel)).parent_path());
    std::ofstream(P(rel), std::ios::binary) << bytes;
  }
  template <class T>
  void WriteArray(const std::string& rel, const std::vector<T>& values, size_t extra_bytes = 0) const {
    std::string b(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
    b.append(extra_bytes, '\x01');
    Write(rel, b);
  }
  static std::string Slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  // Runs a shell command; returns its exit status and stdout.
  static int Run(const std::string& cmd, std::string* out = nullptr) {
    FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
    if (p == nullptr) return -1;
    std::string text;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
    int rc = ::pclose(p);
    if (out) *out = text;
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }
  static int Python(const std::string& script, std::string* out = nullptr) {
    std::string path = (fs::temp_directory_path() / ("trove-td-py-" + std::to_string(::getpid()) + ".py")).string();
    std::ofstream(path) << script;
    int rc = Run("/usr/bin/python3 " + path, out);
    std::remove(path.c_str());
    return rc;
  }

  std::string root_;
};


// A contiguous tensor over owned bytes.
inline TensorView MakeTensor(DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
  TensorView t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.strides.assign(t.shape.size(), 1);
  for (size_t i = t.shape.size(); i-- > 1;) t.strides[i - 1] = t.strides[i] * std::max<int64_t>(t.shape[i], 1);
  t.storage = SharedBytes::FromVector(std::move(bytes));
  return t;
}
template <class T>
TensorView MakeTensorOf(DType dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
  std::vector<uint8_t> b(values.size() * sizeof(T));
  std::memcpy(b.data(), values.data(), b.size());
  return MakeTensor(dtype, std::move(shape), std::move(b));
}

inline void Put(ValueArena& a, Value* dict, const std::string& key, Value* v) {
  dict->entries.emplace_back(a.Str(key), v);
}

inline std::string TensorBytes(const TensorView& t) {
  std::string out;
  t.ForEachChunk([&](const uint8_t* p, size_t n) { out.append(reinterpret_cast<const char*>(p), n); });
  return out;
}

inline const Value* Get(const Value* v, const std::string& key) {
  if (v == nullptr) return nullptr;
  if (v->kind == ValueKind::kObject) v = v->state;
  return v == nullptr ? nullptr : v->Find(key);
}

}  // namespace trove::tdtest
