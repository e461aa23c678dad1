# Precompiled headers: the third-party headers nearly every unit includes (the standard
# library, Boost.Asio, Cap'n Proto, OpenCV, TBB, nlohmann/json; gtest for the suites,
# CLI11 for the programs that parse flags) are parsed once a build, not once a unit.
# Parsing them was 7-8 s of every unit (clang -fsyntax-only of the headers alone), most
# of a suite's unit at -O0 (worker_tests under ASan: 22 s, 14 s with them precompiled),
# and CI builds Ferry twice with Clang (tests/run_all.sh): its TSan build of the suites
# took 400 s instead of 451 (2 cores). FERRY_PCH=OFF builds without.
#
# One precompiled header serves many targets (REUSE_FROM), and a compiler takes it only
# where the flags it was made with match the unit's: position independence (-fPIC for a
# library, -fPIE for a program), the optimisation level and the sanitizers (Clang
# refuses a mismatch; GCC warns with -Winvalid-pch, which CMake passes, and parses the
# headers instead). So a donor target is made for each kind of target (a library or a
# program; in tests/ or not, where the directory's -O0/-O1 and gtest apply), and
# ferry_precompile_headers(), at the end of the top-level CMakeLists.txt, gives each
# target the donor whose kind and compile options are its own. A target with options
# of its own that change code (a tool's -O0 start-up code in a sanitizer build, the
# fuzzed libraries' coverage instrumentation) matches no donor and parses its headers.
#
# Clang only, by default: its precompiled header is 50-60 MB, read lazily. GCC's is
# 300 MB, made in 24-32 s and loaded whole by every unit: a Release build's units took
# 2% less time with it, and the four headers cost more than that.
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  set(ferry_pch_default ON)
else()
  set(ferry_pch_default OFF)
endif()
option(FERRY_PCH "Precompile the third-party headers (build time only)" ${ferry_pch_default})

# GCC takes a precompiled header only where the macros it saw are defined as they were
# when it was made: Boost::headers' BOOST_ALL_NO_LIB (MSVC's auto-linking; nothing on
# Linux) is defined for every target, not just those that link Boost.
if(FERRY_PCH)
  add_compile_definitions(BOOST_ALL_NO_LIB)
endif()

set(FERRY_PCH_HEADERS
  <algorithm> <array> <atomic> <chrono> <condition_variable> <cstdint> <cstdio> <cstdlib> <cstring> <deque>
  <filesystem> <fstream> <functional> <map> <memory> <mutex> <optional> <random> <set> <sstream> <string>
  <string_view> <thread> <unordered_map> <utility> <vector>
  <boost/asio.hpp> <capnp/message.h> <capnp/serialize.h>
  <opencv2/core.hpp> <opencv2/imgproc.hpp>
  <oneapi/tbb/parallel_for.h> <oneapi/tbb/task_arena.h>
  <nlohmann/json.hpp>)

# What must match between a donor and its users: the kind of target, its compile
# options (not its warnings) and whether it uses CLI11.
function(ferry_pch_signature target out)
  get_target_property(type ${target} TYPE)
  get_target_property(kind ${target} FERRY_PCH_KIND)  # a donor's
  if(kind)
    set(sig ${kind})
  elseif(type STREQUAL "EXECUTABLE")
    set(sig "program")
  else()
    set(sig "library")
  endif()
  get_target_property(dir ${target} SOURCE_DIR)
  cmake_path(IS_PREFIX FERRY_PCH_TESTS_DIR "${dir}" NORMALIZE in_tests)
  if(in_tests)
    string(APPEND sig " tests")
  endif()
  get_target_property(libs ${target} LINK_LIBRARIES)
  get_target_property(cli ${target} FERRY_PCH_CLI11)  # a donor's
  if(cli OR (NOT kind AND "CLI11::CLI11" IN_LIST libs))
    string(APPEND sig " cli11")
  endif()
  get_target_property(options ${target} COMPILE_OPTIONS)
  if(options)
    foreach(o IN LISTS options)
      if(NOT o MATCHES "^-W" AND NOT (kind AND o STREQUAL "-fPIE"))
        string(APPEND sig " ${o}")
      endif()
    endforeach()
  endif()
  set(${out} "${sig}" PARENT_SCOPE)
endfunction()

# ferry_pch_donor(NAME program|library [GTEST] [CLI11]), in the directory whose
# options its users share.
function(ferry_pch_donor name kind)
  if(NOT FERRY_PCH)
    return()
  endif()
  add_library(${name} OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch_donor.cc)
  if(kind STREQUAL "program")
    # A program's units are -fPIE (CMAKE_POSITION_INDEPENDENT_CODE); an object library's -fPIC.
    set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
    target_compile_options(${name} PRIVATE -fPIE)
  endif()
  # The users' include paths and definitions, as far as these headers go (Cap'n Proto's
  # are on the default path; its package is found in lib/).
  target_link_libraries(${name} PRIVATE Boost::headers TBB::tbb nlohmann_json::nlohmann_json ferry_opencv_core)
  set(headers ${FERRY_PCH_HEADERS})
  if("GTEST" IN_LIST ARGN)
    target_link_libraries(${name} PRIVATE GTest::gtest)
    list(APPEND headers <gtest/gtest.h>)
  endif()
  if("CLI11" IN_LIST ARGN)
    # CLI11 only for the targets that use it: its namespace-scope validators are
    # objects with constructors, which every unit that includes the header emits and
    # initialises (a library's unit under TSan compiled in 10.5 s with CLI11 in its
    # precompiled header, 7.1 s without, 9.8 s with no precompiled header at all).
    target_link_libraries(${name} PRIVATE CLI11::CLI11)
    list(APPEND headers <CLI/CLI.hpp>)
    set_target_properties(${name} PROPERTIES FERRY_PCH_CLI11 ON)
  endif()
  target_precompile_headers(${name} PRIVATE ${headers})
  set_target_properties(${name} PROPERTIES FERRY_PCH_KIND ${kind})
  set_property(GLOBAL APPEND PROPERTY FERRY_PCH_DONORS ${name})
endfunction()

function(ferry_pch_targets dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    ferry_pch_targets(${sub} more)
    list(APPEND targets ${more})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

function(ferry_precompile_headers)
  if(NOT FERRY_PCH)
    return()
  endif()
  get_property(donors GLOBAL PROPERTY FERRY_PCH_DONORS)
  foreach(d IN LISTS donors)
    ferry_pch_signature(${d} sig)
    set(donor_of_${d} "${sig}")
  endforeach()
  ferry_pch_targets(${PROJECT_SOURCE_DIR} targets)
  set(with 0)
  set(without "")
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(NOT type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|SHARED_LIBRARY|OBJECT_LIBRARY)$" OR t IN_LIST donors)
      continue()  # Python modules (pybind11's flags) and plugins (C) are MODULE libraries
    endif()
    get_target_property(sources ${t} SOURCES)
    list(FILTER sources INCLUDE REGEX "\\.(cc|cpp|cxx)$")
    if(NOT sources)
      continue()
    endif()
    ferry_pch_signature(${t} sig)
    set(found "")
    foreach(d IN LISTS donors)
      if(sig STREQUAL donor_of_${d})
        set(found ${d})
        break()
      endif()
    endforeach()
    if(found)
      target_precompile_headers(${t} REUSE_FROM ${found})
      # If a compiler refuses the header (GCC: -Winvalid-pch) it parses the headers
      # instead, and must find OpenCV's (its only ones off the default path).
      target_include_directories(${t} SYSTEM PRIVATE ${OPENCV_INCLUDE_DIR})
      math(EXPR with "${with} + 1")
    else()
      list(APPEND without ${t})
    endif()
  endforeach()
  list(JOIN without " " without)
  message(STATUS "Precompiled headers: ${with} targets; not for: ${without}")
endfunction()
