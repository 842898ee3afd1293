# install.cmake — qmm installs like a C library: tests/install/check_install.sh installs this build
# into a temporary prefix and builds, runs and checks a consumer program against it through
# pkg-config and through find_package(qmm).
set(QMM_INSTALL_TEST_FLAGS "")
if(QMM_SANITIZE)
  set(QMM_INSTALL_TEST_FLAGS "-fsanitize=address,undefined")
endif()
add_test(NAME install_consumer
         COMMAND sh ${CMAKE_SOURCE_DIR}/tests/install/check_install.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR}
                 ${CMAKE_C_COMPILER} ${CMAKE_COMMAND} ${PROJECT_VERSION} "${QMM_INSTALL_TEST_FLAGS}")
set_tests_properties(install_consumer PROPERTIES TIMEOUT 300)
