# What `cmake --install` and the .deb (`cpack -G DEB`) install:
#   bin/recycler
#   lib/systemd/system/recycler.service, recycler@.service  (RECYCLER_SYSTEMD_UNIT_DIR)
#   lib/python3/dist-packages/recycler_notify/  (RECYCLER_PYTHON_DIR)
#   share/bash-completion/completions/recycler, share/zsh/vendor-completions/_recycler
#   share/doc/recycler/  README.md, docs/, examples/
#   share/man/man1/recycler.1.gz, share/man/man5/recycler.yaml.5.gz: docs/cli.md and
#     docs/configuration.md through pandoc (man/CMakeLists.txt; none without pandoc)
#   etc/recycler/recycler.yaml: a commented sample; /etc/recycler/recycler.yaml
#     under the prefix /usr (the .deb's, where it is a conffile), so that an
#     install into a user's prefix writes nothing to /etc
# The units name the binary by its installed path: they are filled in when
# installed, from the prefix of that install (`--prefix`, CPack's /usr).
include(GNUInstallDirs)

set(RECYCLER_SYSTEMD_UNIT_DIR "lib/systemd/system" CACHE STRING
    "Where the systemd units go, relative to the install prefix (lib/systemd/system is on systemd's search path under /usr and /usr/local)")

set(RECYCLER_PYTHON_DIR "lib/python3/dist-packages" CACHE STRING
    "Where the recycler_notify Python package goes, relative to the install prefix (Debian's path for /usr)")

install(TARGETS recycler RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY python/recycler_notify DESTINATION ${RECYCLER_PYTHON_DIR}
        PATTERN __pycache__ EXCLUDE)
install(FILES completion/recycler.bash DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
        RENAME recycler)
install(FILES completion/_recycler DESTINATION ${CMAKE_INSTALL_DATADIR}/zsh/vendor-completions)

# The sample config: etc/ under the prefix of the install being run, /etc for
# /usr (GNUInstallDirs' rule, which it applies when configuring only: a
# `--prefix` or CPack's /usr comes later). CPack's DEB generator installs with
# the prefix /usr and DESTDIR its staging folder, which file(INSTALL) puts in
# front of an absolute destination.
install(CODE "
  if(CMAKE_INSTALL_PREFIX STREQUAL \"/usr\")
    set(recycler_sysconfdir /etc)
  else()
    set(recycler_sysconfdir \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_SYSCONFDIR}\")
  endif()
  file(INSTALL \"${PROJECT_SOURCE_DIR}/etc/recycler.yaml\"
       DESTINATION \"\${recycler_sysconfdir}/recycler\"
       PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)")

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
# dpkg keeps the admin's edits of the sample config on upgrade.
file(WRITE "${PROJECT_BINARY_DIR}/debian/conffiles" "/etc/recycler/recycler.yaml\n")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA "${PROJECT_BINARY_DIR}/debian/conffiles")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
