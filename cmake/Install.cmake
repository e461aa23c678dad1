# `cmake --install` puts Ferry's client in the prefix as a CMake package:
#   include/ferry/*.h                         the public API
#   lib/libferry_{core,spec,wire,net,client}.a  the client and what it links
#   lib/cmake/ferry/ferryConfig.cmake (+ version file, exported targets)
# so that an unrelated project does
#   find_package(ferry CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE ferry::client)
# and needs Cap'n Proto and OpenSSL (libcapnp-dev, libssl-dev), not OpenCV, TBB or
# GTest. These are the component "dev": `cmake --install build --component dev`
# installs only them. The daemons and tools install themselves (server/, client/,
# bench/) as the component "Unspecified".
include(CMakePackageConfigHelpers)

# loader.h is the in-process Loader, which needs the pipeline (OpenCV, TBB): not part
# of the client package (use Ferry through add_subdirectory for it).
install(DIRECTORY include/ferry DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev PATTERN loader.h EXCLUDE)
install(TARGETS ferry_core ferry_spec ferry_wire ferry_net ferry_client
  EXPORT ferryTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
set(FERRY_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ferry)
install(EXPORT ferryTargets NAMESPACE ferry:: DESTINATION ${FERRY_CMAKE_DIR} COMPONENT dev)
configure_package_config_file(cmake/ferryConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/ferryConfig.cmake
  INSTALL_DESTINATION ${FERRY_CMAKE_DIR})
# 0.x: a minor version may change the API.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/ferryConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/ferryConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/ferryConfigVersion.cmake
  DESTINATION ${FERRY_CMAKE_DIR} COMPONENT dev)
