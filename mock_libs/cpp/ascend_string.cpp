// ge::AscendString: the SDK's libmetadef.so (docs/cpp.md), also the fake toolkit's.
//
// Behaviour from docs/reference/cpp-api.md §2.3. A default-constructed or NULL-constructed
// string holds no std::string at all ("null"); AscendString("") holds an empty one.
// The distinction is visible only in the comparisons: null orders before every
// non-null value and equals only another null (or a NULL C string).
#include "graph/ascend_string.h"

namespace ge {

namespace {
const char_t kEmpty[] = "";

// -1, 0 or 1, with null before everything else and two nulls equal.
int Compare(const std::shared_ptr<std::string> &a, const std::shared_ptr<std::string> &b) {
  if (a == nullptr || b == nullptr) {
    return (a == nullptr ? 0 : 1) - (b == nullptr ? 0 : 1);
  }
  const int c = a->compare(*b);
  return (c > 0) - (c < 0);
}
}  // namespace

AscendString::AscendString(const char_t *const name) {
  if (name != nullptr) {
    name_ = std::make_shared<std::string>(name);
  }
}

AscendString::AscendString(const char_t *const name, size_t length) {
  if (name != nullptr) {
    name_ = std::make_shared<std::string>(name, length);
  }
}

const char_t *AscendString::GetString() const { return name_ == nullptr ? kEmpty : name_->c_str(); }

size_t AscendString::GetLength() const { return name_ == nullptr ? 0U : name_->size(); }

size_t AscendString::Find(const AscendString &ascend_string) const {
  if (name_ == nullptr || ascend_string.name_ == nullptr) {
    return std::string::npos;
  }
  return name_->find(*ascend_string.name_);
}

size_t AscendString::Hash() const {
  return name_ == nullptr ? std::hash<std::string>()(std::string()) : std::hash<std::string>()(*name_);
}

bool AscendString::operator<(const AscendString &d) const { return Compare(name_, d.name_) < 0; }
bool AscendString::operator>(const AscendString &d) const { return Compare(name_, d.name_) > 0; }
bool AscendString::operator<=(const AscendString &d) const { return Compare(name_, d.name_) <= 0; }
bool AscendString::operator>=(const AscendString &d) const { return Compare(name_, d.name_) >= 0; }
bool AscendString::operator==(const AscendString &d) const { return Compare(name_, d.name_) == 0; }
bool AscendString::operator!=(const AscendString &d) const { return Compare(name_, d.name_) != 0; }

bool AscendString::operator==(const char_t *const d) const {
  if (name_ == nullptr || d == nullptr) {
    return name_ == nullptr && d == nullptr;
  }
  return name_->compare(d) == 0;  // embedded NULs make it differ, as a byte comparison should
}

bool AscendString::operator!=(const char_t *const d) const { return !(*this == d); }

}  // namespace ge
