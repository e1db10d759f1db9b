// Implementation of the shared test fixtures (a *_test.cpp so that the test binary picks it up).
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <random>

#include "pskd_test_support.h"

namespace trove::pskd::testing {

TempDir::TempDir() {
  std::random_device rd;
  dir_ = std::filesystem::temp_directory_path() / ("trove-pskd-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
  std::filesystem::create_directories(dir_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string BinDir() {
  const char* env = std::getenv("TROVE_BIN_DIR");
  return env != nullptr ? env : TROVE_BIN_DIR;
}

std::string SourceDir() {
  const char* env = std::getenv("TROVE_SOURCE_DIR");
  return env != nullptr ? env : TROVE_SOURCE_DIR;
}

namespace {
std::string Slurp(int fd) {
  std::string s;
  std::array<char, 4096> buf;
  ssize_t n;
  while ((n = ::read(fd, buf.data(), buf.size())) > 0) s.append(buf.data(), static_cast<size_t>(n));
  return s;
}
}  // namespace

RunResult RunPresk(const std::vector<std::string>& args, const std::string& cwd) {
  const std::string bin = BinDir() + "/presk";
  char out_name[] = "/tmp/presk-out-XXXXXX";
  char err_name[] = "/tmp/presk-err-XXXXXX";
  int out_fd = ::mkstemp(out_name);
  int err_fd = ::mkstemp(err_name);
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::chdir(cwd.c_str()) != 0) ::_exit(127);
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(bin.c_str()));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  RunResult r;
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  ::lseek(out_fd, 0, SEEK_SET);
  ::lseek(err_fd, 0, SEEK_SET);
  r.out = Slurp(out_fd);
  r.err = Slurp(err_fd);
  ::close(out_fd);
  ::close(err_fd);
  ::unlink(out_name);
  ::unlink(err_name);
  return r;
}

void WriteFile(const std::string& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string HeaderBytes(uint16_t version, std::string_view type, uint64_t count, const std::vector<uint8_t>& encodings,
                        int32_t leaves_override) {
  std::string h = "PSKD";
  auto le = [&](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) h += static_cast<char>(v >> (8 * i));
  };
  le(version, 2);
  le(type.size(), 4);
  h += type;
  le(count, 8);
  if (version == 2) {
    le(leaves_override >= 0 ? static_cast<uint64_t>(leaves_override) : encodings.size(), 4);
    for (uint8_t e : encodings) h += static_cast<char>(e);
  }
  return h;
}

PskdCode CodeOf(const Error& e) {
  auto code = PskdCodeOf(e);
  EXPECT_TRUE(code.has_value()) << "no E9xxx code in: " << e.message();
  return code.value_or(PskdCode::kLayout);
}

}  // namespace trove::pskd::testing
