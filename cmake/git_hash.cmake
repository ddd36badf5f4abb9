# git_hash.cmake — run at every build (cmake -P, the kiln_git_hash target): writes OUT, a
# header defining KILN_GIT_HASH as `git describe --always --dirty` of SRC ("unknown" outside
# git), rewriting it only when the text changes, so `kiln --version` and the benchmark rows
# name the commit the binary was built from, not the one the build was configured at.
execute_process(COMMAND git describe --always --dirty WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE hash OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR hash STREQUAL "")
  set(hash unknown)
endif()
set(text "#define KILN_GIT_HASH \"${hash}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
else()
  set(old "")
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
