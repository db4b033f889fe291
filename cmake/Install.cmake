# What `cmake --install` and the .deb (`cpack -G DEB`) install:
#   bin/recycler
#   lib/systemd/system/recycler.service, recycler@.service  (RECYCLER_SYSTEMD_UNIT_DIR)
#   share/doc/recycler/  README.md, docs/, examples/
#   share/man/man1/recycler.1.gz, share/man/man5/recycler.yaml.5.gz: docs/cli.md and
#     docs/configuration.md through pandoc (man/CMakeLists.txt; none without pandoc)
# The units name the binary by its installed path: they are filled in when
# installed, from the prefix of that install (`--prefix`, CPack's /usr).
include(GNUInstallDirs)

set(RECYCLER_SYSTEMD_UNIT_DIR "lib/systemd/system" CACHE STRING
    "Where the systemd units go, relative to the install prefix (lib/systemd/system is on systemd's search path under /usr and /usr/local)")

install(TARGETS recycler RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

foreach(unit recycler.service recycler@.service)
  # Escaped \${CMAKE_INSTALL_PREFIX}: the prefix of the install being run.
  install(CODE "
    set(CMAKE_INSTALL_FULL_BINDIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}\")
    set(CMAKE_INSTALL_FULL_DOCDIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_DOCDIR}\")
    configure_file(\"${PROJECT_SOURCE_DIR}/systemd/${unit}.in\"
                   \"${PROJECT_BINARY_DIR}/systemd/${unit}\" @ONLY)")
  install(FILES "${PROJECT_BINARY_DIR}/systemd/${unit}" DESTINATION ${RECYCLER_SYSTEMD_UNIT_DIR})
endforeach()

install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)
install(DIRECTORY examples/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples
        PATTERN CMakeLists.txt EXCLUDE PATTERN __pycache__ EXCLUDE)

# cpack -G DEB (from the build directory): recycler_VERSION_amd64.deb whose
# Depends are the runtime libraries the binary links, as dpkg-shlibdeps
# finds them (libuv1, libyaml-cpp0.7, libspdlog1.10, libfmt9, libcgroup2, ...).
set(CPACK_PACKAGE_NAME recycler)
set(CPACK_PACKAGE_VENDOR "recycler")
set(CPACK_PACKAGE_CONTACT "recycler maintainers <recycler@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "process supervisor that recycles workers before the OOM killer does")
set(CPACK_PACKAGE_DESCRIPTION
    "recycler runs programs in their own cgroups, watches their memory, requests and threads, and restarts them through policies before the kernel's OOM killer does.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_STRIP_FILES ON)
include(CPack)
