# packaging.cmake — what `cmake --install` puts where, and `cpack -G DEB`: the library, the command
# beside it (it finds the library through the relative path from bin to lib), the public header,
# a relocatable pkg-config file and the trace plotter.
include(GNUInstallDirs)
install(TARGETS gpupool LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS gpupool_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/gpupool.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(PROGRAMS ${PROJECT_SOURCE_DIR}/scripts/plot-trace DESTINATION ${CMAKE_INSTALL_DATADIR}/gpupool)
file(RELATIVE_PATH GP_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
string(REGEX REPLACE "/$" "" GP_PC_TO_PREFIX "${GP_PC_TO_PREFIX}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/gpupool.pc.in ${PROJECT_BINARY_DIR}/gpupool.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/gpupool.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# `cpack -G DEB` in the build folder: a Debian package of the above.
set(CPACK_PACKAGE_NAME gpupool)
set(CPACK_PACKAGE_VENDOR "gpupool")
set(CPACK_PACKAGE_CONTACT "gpupool maintainers <maintainers@gpupool.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "caching GPU memory pool for unmodified CUDA programs (LD_PRELOAD), and the gpupool command")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
find_program(GP_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(GP_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
else()
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6")
endif()
include(CPack)
