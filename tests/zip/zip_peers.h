// tests/zip/zip_peers.h: running the reference zip tools (Debian's Python zipfile, Info-ZIP
// unzip) from the zip tests, in a per-test temporary directory.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace trove::ziptest {

namespace fs = std::filesystem;

// A fresh directory for one test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string test = info != nullptr ? info->name() : "test";
    for (char& c : test) {
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    }
    std::string stem = "trove-zip-" + test + "-XXXXXX";
    std::string templ = (fs::temp_directory_path() / stem).string();
    if (::mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

inline std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

struct RunResult {
  int status = -1;  // exit status, -1 if it did not exit normally
  std::string out;  // stdout and stderr
};

inline RunResult Run(const std::string& command) {
  RunResult r;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// Runs a Python script (Debian's /usr/bin/python3, which has zipfile, bz2 and lzma) with args.
inline RunResult Python(const TempDir& dir, const std::string& script, const std::vector<std::string>& args = {}) {
  static int counter = 0;
  const std::string path = dir / ("script" + std::to_string(counter++) + ".py");
  WriteFile(path, script);
  std::string cmd = "/usr/bin/python3 " + ShellQuote(path);
  for (const std::string& a : args) cmd += " " + ShellQuote(a);
  return Run(cmd);
}

// Python's own verdict: ZipFile(p).testzip() is None (every CRC checks, every header parses).
inline RunResult PythonTestzip(const TempDir& dir, const std::string& archive) {
  return Python(dir, "import sys, zipfile\nprint(zipfile.ZipFile(sys.argv[1]).testzip())\n", {archive});
}

inline RunResult UnzipTest(const std::string& archive) { return Run("unzip -t " + ShellQuote(archive)); }

}  // namespace trove::ziptest
