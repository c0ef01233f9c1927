#include "cohort/core/storage.h"

#include <new>

namespace cohort {

void Storage::AlignedFree::operator()(std::byte* p) const {
  ::operator delete(p, std::align_val_t(kAlignment));
}

Storage::Storage(size_t nbytes) : nbytes_(nbytes) {
  // Round up so vector kernels may read whole 64-byte lines at the tail.
  size_t padded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  if (padded == 0) padded = kAlignment;
  data_.reset(static_cast<std::byte*>(::operator new(padded, std::align_val_t(kAlignment))));
}

}  // namespace cohort
