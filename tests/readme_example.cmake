# readme_example: the README's C example must be examples/hello.c (from its
# #include on), which example_hello builds and runs; they had drifted apart
# once. cmake -DREADME=... -DHELLO=... -P readme_example.cmake
file(READ "${README}" readme)
file(READ "${HELLO}" hello)
string(FIND "${hello}" "#include <voxconv.h>" at)
string(SUBSTRING "${hello}" ${at} -1 body)
string(FIND "${readme}" "## A C example" sec)
string(SUBSTRING "${readme}" ${sec} -1 rest)
string(FIND "${rest}" "```c\n" open)
math(EXPR open "${open} + 5")
string(SUBSTRING "${rest}" ${open} -1 rest)
string(FIND "${rest}" "```\n" close)
string(SUBSTRING "${rest}" 0 ${close} block)
if(NOT block STREQUAL body)
  message(FATAL_ERROR "README.md's C example differs from examples/hello.c; "
                      "copy hello.c (from #include <voxconv.h>) into it")
endif()
