# layers.cmake — every #include "..." under src/, tools/ and bench/ points down the layers
# (base < core < engines < dispatch < api < io = tp < tools; tests/layers.py writes the order), and
# the checker itself fails on planted upward and sideways includes (layers_selftest).
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME layers COMMAND Python3::Interpreter ${CMAKE_SOURCE_DIR}/tests/layers.py ${CMAKE_SOURCE_DIR})
  add_test(NAME layers_selftest
           COMMAND Python3::Interpreter ${CMAKE_SOURCE_DIR}/tests/layers.py --selftest ${CMAKE_SOURCE_DIR})
else()
  foreach(t layers layers_selftest)
    add_test(NAME ${t} COMMAND sh -c "echo 'SKIPPED: python3 not found: the include layers are not checked'; exit 77")
  endforeach()
endif()
set_tests_properties(layers layers_selftest PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
