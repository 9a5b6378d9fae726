# packaging.cmake — what `cmake --install` puts where, and `cpack -G DEB`: the library, the command
# beside it (it finds the library through the relative path from bin to lib), the public header,
# a pkg-config file, the trace plotter and the licence. Paths from GNUInstallDirs (the top CMakeLists.txt picks
# the multiarch libdir on Debian).
include(GNUInstallDirs)
if(TARGET gpupool)
  install(TARGETS gpupool LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
install(TARGETS gpupool_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/gpupool.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(PROGRAMS ${PROJECT_SOURCE_DIR}/scripts/plot-trace DESTINATION ${CMAKE_INSTALL_DATADIR}/gpupool)
# The licence, where Debian keeps each package's (/usr/share/doc/<package>/copyright).
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/gpupool
        RENAME copyright)
# gpupool.pc names the prefix it is installed under (`cmake --install --prefix`, or /usr in the
# package), so it is written at install time: absolute paths, none with `..` in them.
install(CODE "
  set(GP_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  set(CMAKE_INSTALL_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
  set(CMAKE_INSTALL_INCLUDEDIR \"${CMAKE_INSTALL_INCLUDEDIR}\")
  set(CMAKE_INSTALL_BINDIR \"${CMAKE_INSTALL_BINDIR}\")
  set(PROJECT_VERSION \"${PROJECT_VERSION}\")
  configure_file(\"${CMAKE_CURRENT_LIST_DIR}/gpupool.pc.in\" \"${PROJECT_BINARY_DIR}/pc/gpupool.pc\" @ONLY)
")
install(FILES ${PROJECT_BINARY_DIR}/pc/gpupool.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# `cpack -G DEB` in the build folder: a Debian package of the above.
set(CPACK_PACKAGE_NAME gpupool)
set(CPACK_PACKAGE_VENDOR "gpupool")
# Who answers for a package built here: a packager names themselves (-DGPUPOOL_PACKAGE_CONTACT).
set(GPUPOOL_PACKAGE_CONTACT "gpupool maintainers <maintainers@gpupool.invalid>" CACHE STRING
    "the Debian package's Maintainer field: \"Name <address>\"")
set(CPACK_PACKAGE_CONTACT "${GPUPOOL_PACKAGE_CONTACT}")
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "caching GPU memory pool for unmodified CUDA programs (LD_PRELOAD), and the gpupool command")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_STRIP_FILES ON) # the library and the command without their debugging symbols
find_program(GP_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(GP_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
else()
  get_property(gp_exporter_built GLOBAL PROPERTY GP_EXPORTER_BUILT)
  if(gp_exporter_built) # gpupool exporter links GNU libmicrohttpd
    set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6, libmicrohttpd12")
  else()
    set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6")
  endif()
endif()
include(CPack)
