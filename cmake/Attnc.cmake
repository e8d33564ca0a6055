# Attnc.cmake: compile attnc specs into a library target.
#
#   list(APPEND CMAKE_MODULE_PATH <attnc checkout>/cmake)
#   include(Attnc)
#   attnc_add_kernels(NAME SPECS a.attn [b.attn ...]
#                     [TARGETS cpu | cpu,cuda] [TRIPLE <triple>] [FLAGS <attnc build flags>...])
#   target_link_libraries(app PRIVATE NAME)
#
# attnc_add_kernels runs `attnc build` on the specs at build time (again
# whenever a spec or attnc changes) into ${CMAKE_CURRENT_BINARY_DIR}/NAME,
# compiles every variant's <variant>.ll with LLVM 14's `opt -O3` and
# `llc -O3` into an object, and makes NAME a static library of those objects
# with the directory holding every <variant>.h on its PUBLIC include path
# (so `#include "<variant>.h"`) and libm and the thread library linked.
# With TARGETS cpu,cuda it also generates <variant>.cu and, when the CUDA
# language is enabled in the project (project(... CUDA) or
# enable_language(CUDA)), compiles it into NAME and links CUDA::cudart;
# otherwise the .cu is generated but not compiled. The variable
# NAME_MANIFEST names the generated manifest.json.
#
# Cache variables: ATTNC_EXECUTABLE (the attnc binary; found on PATH by
# default), ATTNC_OPT and ATTNC_LLC (LLVM 14's opt and llc: opt-14/llc-14 or
# opt/llc from /usr/lib/llvm-14/bin, else PATH).
#
# The variant names are read at configure time with `attnc check`; editing
# a spec re-runs the configure step.

include_guard(GLOBAL)
cmake_minimum_required(VERSION 3.20)

find_program(ATTNC_EXECUTABLE NAMES attnc DOC "the attnc compiler (go install github.com/attnc/attnc/cmd/attnc@<version>)")
find_program(ATTNC_OPT NAMES opt-14 opt HINTS /usr/lib/llvm-14/bin DOC "LLVM 14 opt")
find_program(ATTNC_LLC NAMES llc-14 llc HINTS /usr/lib/llvm-14/bin DOC "LLVM 14 llc")

function(attnc_add_kernels name)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "TRIPLE" "SPECS;TARGETS;FLAGS")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "attnc_add_kernels(${name}): unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT ARG_SPECS)
    message(FATAL_ERROR "attnc_add_kernels(${name}): SPECS names no spec file")
  endif()
  if(NOT ATTNC_EXECUTABLE)
    message(FATAL_ERROR "attnc_add_kernels: attnc not found: put it on PATH "
      "(go install github.com/attnc/attnc/cmd/attnc@<version>) or set -DATTNC_EXECUTABLE=/path/to/attnc")
  endif()
  if(NOT ATTNC_OPT OR NOT ATTNC_LLC)
    message(FATAL_ERROR "attnc_add_kernels: LLVM 14 opt and llc not found (apt-get install llvm-14, "
      "or set ATTNC_OPT and ATTNC_LLC)")
  endif()

  # TARGETS: cpu (default) or cpu,cuda, as one comma list or several words.
  set(targets cpu)
  if(ARG_TARGETS)
    string(REPLACE "," ";" targets "${ARG_TARGETS}")
  endif()
  if(NOT "cpu" IN_LIST targets)
    message(FATAL_ERROR "attnc_add_kernels(${name}): TARGETS must include cpu (cpu or cpu,cuda)")
  endif()
  foreach(t IN LISTS targets)
    if(NOT t STREQUAL "cpu" AND NOT t STREQUAL "cuda")
      message(FATAL_ERROR "attnc_add_kernels(${name}): unknown target ${t} (cpu or cpu,cuda)")
    endif()
  endforeach()
  list(JOIN targets "," target_list)

  set(specs "")
  foreach(s IN LISTS ARG_SPECS)
    get_filename_component(abs "${s}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    list(APPEND specs "${abs}")
  endforeach()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${specs})

  execute_process(COMMAND "${ATTNC_EXECUTABLE}" check ${specs}
    OUTPUT_VARIABLE checked ERROR_VARIABLE check_err RESULT_VARIABLE check_rc)
  if(NOT check_rc EQUAL 0)
    message(FATAL_ERROR "attnc_add_kernels(${name}): attnc check failed:\n${checked}${check_err}")
  endif()
  string(REGEX MATCHALL "ok [A-Za-z0-9_]+" oks "${checked}")
  set(variants "")
  foreach(ok IN LISTS oks)
    string(SUBSTRING "${ok}" 3 -1 v)
    list(APPEND variants "${v}")
  endforeach()
  if(NOT variants)
    message(FATAL_ERROR "attnc_add_kernels(${name}): no variant in ${ARG_SPECS}")
  endif()

  set(dir "${CMAKE_CURRENT_BINARY_DIR}/${name}")
  set(generated "${dir}/manifest.json")
  set(cu_files "")
  foreach(v IN LISTS variants)
    list(APPEND generated "${dir}/${v}.ll" "${dir}/${v}.h")
    if("cuda" IN_LIST targets)
      list(APPEND generated "${dir}/${v}.cu")
      list(APPEND cu_files "${dir}/${v}.cu")
    endif()
  endforeach()
  set(triple_flag "")
  if(ARG_TRIPLE)
    set(triple_flag --triple "${ARG_TRIPLE}")
  endif()
  add_custom_command(OUTPUT ${generated}
    COMMAND "${ATTNC_EXECUTABLE}" build ${specs} --target ${target_list} ${triple_flag} ${ARG_FLAGS} -o "${dir}"
    DEPENDS ${specs} "${ATTNC_EXECUTABLE}"
    COMMENT "attnc build ${ARG_SPECS} (${target_list})"
    VERBATIM)

  set(objects "")
  foreach(v IN LISTS variants)
    add_custom_command(OUTPUT "${dir}/${v}.o"
      COMMAND "${ATTNC_OPT}" -O3 "${dir}/${v}.ll" -o "${dir}/${v}.bc"
      COMMAND "${ATTNC_LLC}" -O3 -relocation-model=pic -filetype=obj "${dir}/${v}.bc" -o "${dir}/${v}.o"
      DEPENDS "${dir}/${v}.ll"
      COMMENT "opt -O3 and llc -O3: ${v}.ll"
      VERBATIM)
    list(APPEND objects "${dir}/${v}.o")
  endforeach()
  set_source_files_properties(${objects} PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)

  set(sources ${objects})
  get_property(languages GLOBAL PROPERTY ENABLED_LANGUAGES)
  set(with_cuda FALSE)
  if(cu_files AND "CUDA" IN_LIST languages)
    set(with_cuda TRUE)
    list(APPEND sources ${cu_files})
  elseif(cu_files)
    message(STATUS "attnc_add_kernels(${name}): CUDA is not enabled in this project; the .cu files are generated, not compiled")
  endif()

  add_library(${name} STATIC ${sources})
  # The headers are generated with the objects: build them before any
  # target that links NAME compiles.
  add_custom_target(${name}_generate DEPENDS ${generated})
  add_dependencies(${name} ${name}_generate)
  set_target_properties(${name} PROPERTIES LINKER_LANGUAGE C POSITION_INDEPENDENT_CODE ON)
  target_include_directories(${name} PUBLIC "${dir}")
  find_package(Threads REQUIRED)
  target_link_libraries(${name} PUBLIC Threads::Threads m)
  if(with_cuda)
    find_package(CUDAToolkit REQUIRED)
    target_link_libraries(${name} PUBLIC CUDA::cudart)
  endif()
  set(${name}_MANIFEST "${dir}/manifest.json" PARENT_SCOPE)
endfunction()
