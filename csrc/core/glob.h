// Shell-style globs, as Python's fnmatch.fnmatchcase matches them: the op policy's module-path rules. Knows nothing
// about TorchScript.
#pragma once

#include <string_view>

namespace torch_mp::core {

// Whether `text` matches a shell-style glob, as Python's fnmatch.fnmatchcase: `*` any run of characters (dots
// included), `?` one character, `[abc]` / `[a-z]` one of a set, `[!abc]` one not in it.
bool globMatches(std::string_view pattern, std::string_view text);

} // namespace torch_mp::core
