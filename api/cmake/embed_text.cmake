# cmake -DIN=<file> -DOUT=<header> -DNAME=<identifier> -P embed_text.cmake
# Writes a header holding the file's text as `inline constexpr std::string_view NAME`.
file(READ "${IN}" text)
string(FIND "${text}" ")DBXEMBED\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw string delimiter )DBXEMBED\"")
endif()
file(WRITE "${OUT}.tmp" "#pragma once\n// Generated from ${IN}; do not edit.\n#include <string_view>\ninline constexpr std::string_view ${NAME} = R\"DBXEMBED(${text})DBXEMBED\";\n")
file(RENAME "${OUT}.tmp" "${OUT}")
