# docs.cmake — the contract lives in the repository: every "SPEC §n" cited anywhere resolves to a
# section of docs/SPEC.md, and the README points there.
add_test(NAME docs_spec_citations COMMAND sh ${CMAKE_SOURCE_DIR}/tests/docs/check_spec_refs.sh ${CMAKE_SOURCE_DIR})
