/* ge::AscendString as docs/reference/cpp-api.md §2.3 declares it (the same layout as the
 * vendor's: one std::shared_ptr<std::string>). Every member function except the
 * defaulted ones is defined out of line, in the SDK's libmetadef.so
 * (mock_libs/cpp/ascend_string.cpp), so that a consumer that forgets to link the metadef
 * library fails to link, as on an Ascend host. */
#ifndef LLDD_SDK_GRAPH_ASCEND_STRING_H
#define LLDD_SDK_GRAPH_ASCEND_STRING_H

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "graph/types.h"

namespace ge {

class AscendString {
 public:
  AscendString() = default;
  ~AscendString() = default;
  AscendString(const char_t *const name);
  AscendString(const char_t *const name, size_t length);
  const char_t *GetString() const;
  size_t GetLength() const;
  size_t Find(const AscendString &ascend_string) const;
  size_t Hash() const;
  bool operator<(const AscendString &d) const;
  bool operator>(const AscendString &d) const;
  bool operator<=(const AscendString &d) const;
  bool operator>=(const AscendString &d) const;
  bool operator==(const AscendString &d) const;
  bool operator!=(const AscendString &d) const;
  bool operator==(const char_t *const d) const;
  bool operator!=(const char_t *const d) const;

 private:
  std::shared_ptr<std::string> name_;
};

}  // namespace ge

namespace std {
template <>
struct hash<ge::AscendString> {
  size_t operator()(const ge::AscendString &s) const { return s.Hash(); }
};
}  // namespace std

#endif  // LLDD_SDK_GRAPH_ASCEND_STRING_H
