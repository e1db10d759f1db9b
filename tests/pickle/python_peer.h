// tests/pickle/python_peer.h: runs a Python script with Debian's CPython (the reference pickle
// implementation) and returns its standard output.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace trove::testing {

inline constexpr const char* kPython = "/usr/bin/python3";

inline bool HavePython() { return access(kPython, X_OK) == 0; }

// Runs `script`; fails the test (and returns "") when Python exits non-zero.
inline std::string RunPython(const std::string& script) {
  char path[] = "/tmp/trove_pickle_peer_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) {
    ADD_FAILURE() << "mkstemp failed";
    return "";
  }
  close(fd);
  {
    std::ofstream f(path);
    f << script;
  }
  // Appended piece by piece: GCC 12 warns (-Warray-bounds, wrongly) on operator+ here.
  std::string command = kPython;
  command += ' ';
  command += path;
  FILE* p = popen(command.c_str(), "r");
  std::string out;
  if (p != nullptr) {
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    int status = pclose(p);
    if (status != 0) ADD_FAILURE() << "python exited with status " << status;
  } else {
    ADD_FAILURE() << "popen failed";
  }
  std::remove(path);
  return out;
}

inline std::vector<uint8_t> FromHex(const std::string& hex) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

inline std::vector<std::string> SplitFields(const std::string& line) {
  std::vector<std::string> fields;
  std::stringstream ss(line);
  std::string f;
  while (std::getline(ss, f, '\t')) fields.push_back(f);
  return fields;
}

}  // namespace trove::testing
