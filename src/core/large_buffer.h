// core/large_buffer.h: buffers of megabytes that a pass keeps and reuses, in huge pages.
//
// A streaming pass (a Reader's or a Stream's window, a pipelined cast's output windows) works
// through a buffer of a few MiB. Allocated afresh for every tensor, such a buffer is handed back
// to the kernel at each free (glibc does so for large blocks), and every 4 KiB of the next one
// then costs a page fault as it is first written: on the benchmark machine (a virtual machine)
// a one-thread diff ran 7x slower than a two-thread one for that alone. So these buffers are
// allocated in whole 2 MiB pages where the kernel gives them (transparent huge pages on request:
// one fault per 2 MiB), and each thread keeps a few spares for its next pass. A thread's peak
// memory is unchanged (it held the buffer while working); its spares stay until it exits.
//
// Thread safety: SpareBuffers keeps each thread's spares apart (thread_local); a buffer taken on
// one thread may be released on another (it joins that thread's spares).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

namespace trove {

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using LargeBuffer = std::unique_ptr<uint8_t, FreeDeleter>;

// `bytes` (rounded up to whole 2 MiB pages), asked of the kernel in huge pages; throws
// std::bad_alloc when refused. Its contents are undefined.
LargeBuffer AllocateLargeBuffer(size_t bytes);

// One thread's spare buffers of kBytes each: Take() one, and it goes back to the spares of the
// thread that destroys the Held, up to kKeep of them (the rest are freed).
template <uint64_t kBytes, size_t kKeep>
class SpareBuffers {
 public:
  class Held {
   public:
    Held() = default;
    explicit Held(LargeBuffer buffer) : buffer_(std::move(buffer)) {}
    Held(Held&&) noexcept = default;
    Held& operator=(Held&&) noexcept = default;
    ~Held() { Give(std::move(buffer_)); }
    uint8_t* get() const { return buffer_.get(); }
    explicit operator bool() const { return buffer_ != nullptr; }

   private:
    LargeBuffer buffer_;
  };

  static Held Take() {
    std::vector<LargeBuffer>& spares = Spares();
    if (spares.empty()) return Held(AllocateLargeBuffer(kBytes));
    Held held(std::move(spares.back()));
    spares.pop_back();
    return held;
  }

 private:
  static void Give(LargeBuffer buffer) {
    std::vector<LargeBuffer>& spares = Spares();
    if (buffer && spares.size() < kKeep) spares.push_back(std::move(buffer));
  }
  static std::vector<LargeBuffer>& Spares() {
    thread_local std::vector<LargeBuffer> spares;
    return spares;
  }
};

}  // namespace trove
