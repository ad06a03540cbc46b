#pragma once
// Where the Python companion's bootstrap folder (launcher/python: a
// sitecustomize.py and the _ddplaunch_companion package) is: installed beside
// the binary as <prefix>/share/ddplaunch/python, or, for a binary run from
// its build tree, in the source tree it was built from.
//
// Threading: free function, no shared state.

#include <string>

namespace ddp {

/// The folder, or empty when neither place holds the companion.
/// `looked_in` gets the places tried, for the message when it is missing.
std::string find_python_companion(std::string* looked_in = nullptr);

}  // namespace ddp
