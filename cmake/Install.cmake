include(GNUInstallDirs)
# Headers of the public API. Executables install themselves (server/, bench/).
install(DIRECTORY include/ferry DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
