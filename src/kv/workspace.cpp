// Workspace (veloxquant/kv/codec.h): per-slot scratch buffers, grown without copying.
#include <cstdlib>
#include <algorithm>
#include <new>

#include "veloxquant/kv/codec.h"

namespace vq::kv {

void Workspace::Free::operator()(void* p) const { std::free(p); }

void* Workspace::bytes(Slot slot, size_t n) {
  Buffer& b = buffers_[size_t(slot)];
  if (b.size < n || !b.data) {
    const size_t size = (std::max<size_t>(n, 1) + kAlign - 1) / kAlign * kAlign;
    b.data.reset();  // the old contents are not kept: a user writes what it reads
    void* p = std::aligned_alloc(kAlign, size);
    if (!p) throw std::bad_alloc();
    b.data.reset(p);
    b.size = size;
  }
  return b.data.get();
}

void Workspace::trim(Slot slot, size_t max_bytes) {
  Buffer& b = buffers_[size_t(slot)];
  if (b.size > max_bytes) {
    b.data.reset();
    b.size = 0;
  }
}

}  // namespace vq::kv
