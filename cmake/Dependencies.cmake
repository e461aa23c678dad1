# All dependencies come from Debian 12 packages (see README.md).
find_package(Threads REQUIRED)
find_package(Boost 1.74 REQUIRED)          # header-only Asio; no components on purpose
find_package(TBB REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)

# OpenCVConfig.cmake ships only in the large libopencv-dev, so the component libraries
# are found by hand from libopencv-{core,imgproc,imgcodecs}-dev. Ferry's libraries and
# programs link core and imgproc only; imgcodecs (whose Debian build pulls in GDAL and a
# hundred more libraries) is for the tests, which compare Ferry's decoders with it, and
# the benchmark tools, which encode images.
find_path(OPENCV_INCLUDE_DIR opencv2/core.hpp PATH_SUFFIXES opencv4 REQUIRED)
foreach(m core imgproc imgcodecs)
  find_library(OPENCV_${m}_LIB opencv_${m} REQUIRED)
  add_library(ferry_opencv_${m} UNKNOWN IMPORTED)
  set_target_properties(ferry_opencv_${m} PROPERTIES
    IMPORTED_LOCATION ${OPENCV_${m}_LIB}
    INTERFACE_INCLUDE_DIRECTORIES ${OPENCV_INCLUDE_DIR})
endforeach()

# The other formats' own libraries (lib/image/format_decoders.h): libpng, libtiff (CMake's
# find modules), libwebp (pkg-config).
# Object storage (lib/store): libcurl signs S3 requests (SigV4) and moves the bytes;
# expat parses the listings.
find_package(CURL 7.75 REQUIRED)
find_package(EXPAT REQUIRED)
find_package(PNG REQUIRED)
find_package(TIFF REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(WEBP REQUIRED IMPORTED_TARGET libwebp)

# libjpeg-turbo: the libjpeg API (ROI/DCT-scaled decode) and TurboJPEG (the baseline).
# Its CMake config names a static archive Debian does not ship, so find by hand too.
find_path(JPEG_TURBO_INCLUDE_DIR jpeglib.h REQUIRED)
find_library(JPEG_TURBO_LIB NAMES jpeg REQUIRED)
find_library(TURBOJPEG_LIB NAMES turbojpeg REQUIRED)
add_library(ferry_libjpeg UNKNOWN IMPORTED)
set_target_properties(ferry_libjpeg PROPERTIES IMPORTED_LOCATION ${JPEG_TURBO_LIB}
  INTERFACE_INCLUDE_DIRECTORIES ${JPEG_TURBO_INCLUDE_DIR})
add_library(ferry_turbojpeg UNKNOWN IMPORTED)
set_target_properties(ferry_turbojpeg PROPERTIES IMPORTED_LOCATION ${TURBOJPEG_LIB})

# SentencePiece (libsentencepiece-dev), optional: captions tokenized on the worker (the
# "tokens" target). Without it every other job builds and runs; a job asking for
# tokens is refused by name. Found by hand (Debian ships no CMake config for it).
option(FERRY_WITH_SENTENCEPIECE "Tokenize captions with SentencePiece when it is installed" ON)
if(FERRY_WITH_SENTENCEPIECE)
  find_path(SENTENCEPIECE_INCLUDE_DIR sentencepiece_processor.h)
  find_library(SENTENCEPIECE_LIB NAMES sentencepiece)
  if(SENTENCEPIECE_INCLUDE_DIR AND SENTENCEPIECE_LIB)
    add_library(ferry_sentencepiece UNKNOWN IMPORTED)
    set_target_properties(ferry_sentencepiece PROPERTIES IMPORTED_LOCATION ${SENTENCEPIECE_LIB}
      INTERFACE_INCLUDE_DIRECTORIES ${SENTENCEPIECE_INCLUDE_DIR})
    message(STATUS "SentencePiece: ${SENTENCEPIECE_LIB} (captions can be tokenized on the worker)")
    # Its trainer: the tests train a small model (not needed by Ferry itself).
    find_library(SENTENCEPIECE_TRAIN_LIB NAMES sentencepiece_train)
    if(SENTENCEPIECE_TRAIN_LIB)
      add_library(ferry_sentencepiece_train UNKNOWN IMPORTED)
      set_target_properties(ferry_sentencepiece_train PROPERTIES IMPORTED_LOCATION ${SENTENCEPIECE_TRAIN_LIB}
        INTERFACE_INCLUDE_DIRECTORIES ${SENTENCEPIECE_INCLUDE_DIR})
    endif()
  else()
    message(STATUS "SentencePiece: not found (apt-get install libsentencepiece-dev): no \"tokens\" target")
  endif()
endif()

# jemalloc (libjemalloc-dev), optional: ferry-dispatcher's allocator. Its connections'
# thread allocates each request and reply and the deciding thread frees them (and the
# other way round); glibc's malloc then spends its time consolidating and unlinking
# chunks. With jemalloc the dispatcher's CPU per heartbeat at 4,000 workers fell from
# 31-32 us to 24 us (ferry-bench dispatcher-load, BENCHMARKS.md). Not with a sanitizer,
# which brings its own. Without it the dispatcher builds and runs on glibc's.
option(FERRY_WITH_JEMALLOC "Link ferry-dispatcher with jemalloc when it is installed" ON)
if(FERRY_WITH_JEMALLOC AND NOT FERRY_SANITIZE AND NOT FERRY_TSAN)
  pkg_check_modules(JEMALLOC IMPORTED_TARGET jemalloc)
  if(JEMALLOC_FOUND)
    message(STATUS "jemalloc: ${JEMALLOC_VERSION} (ferry-dispatcher's allocator)")
  else()
    message(STATUS "jemalloc: not found (apt-get install libjemalloc-dev): ferry-dispatcher uses glibc's malloc")
  endif()
endif()

if(FERRY_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(FERRY_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
