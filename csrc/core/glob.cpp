#include "core/glob.h"

#include <cstddef>

namespace torch_mp::core {

namespace {

// Matches one bracket expression at the start of `pattern` ("[abc]", "[!a-z]") against `c`; `length` is set to the
// expression's length, 0 when the bracket is not closed (then "[" is an ordinary character, as in fnmatch).
bool bracketMatches(std::string_view pattern, char c, size_t& length) {
  size_t i = 1;
  const bool negated = i < pattern.size() && pattern[i] == '!';
  i += negated;
  const size_t first = i;
  bool found = false;
  for (; i < pattern.size() && (pattern[i] != ']' || i == first); ++i) {
    if (i + 2 < pattern.size() && pattern[i + 1] == '-' && pattern[i + 2] != ']') {
      found = found || (pattern[i] <= c && c <= pattern[i + 2]);
      i += 2;
    } else {
      found = found || pattern[i] == c;
    }
  }
  if (i >= pattern.size()) {
    length = 0;
    return false;
  }
  length = i + 1;
  return found != negated;
}

} // namespace

bool globMatches(std::string_view pattern, std::string_view text) {
  // iterative matching with one backtracking point for the last `*`
  size_t p = 0;
  size_t t = 0;
  size_t starP = std::string_view::npos;
  size_t starT = 0;
  while (t < text.size()) {
    bool advanced = false;
    if (p < pattern.size()) {
      if (pattern[p] == '*') {
        starP = p++;
        starT = t;
        continue;
      }
      if (pattern[p] == '[') {
        size_t length = 0;
        const bool matched = bracketMatches(pattern.substr(p), text[t], length);
        if (length == 0 ? text[t] == '[' : matched) {
          p += length == 0 ? 1 : length;
          ++t;
          advanced = true;
        }
      } else if (pattern[p] == '?' || pattern[p] == text[t]) {
        ++p;
        ++t;
        advanced = true;
      }
    }
    if (!advanced) {
      if (starP == std::string_view::npos) {
        return false;
      }
      p = starP + 1;
      t = ++starT;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') {
    ++p;
  }
  return p == pattern.size();
}

} // namespace torch_mp::core
