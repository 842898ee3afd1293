# tp.cmake — the tensor-parallel tests (SPEC §6), built only when libqmm has MPI. Each runs under
# `mpirun -np 2` and `-np 3` (oversubscribed, root-safe, loopback only) through
# tests/mpi/run_mpi.sh, which skips (77) when mpirun is missing. TIMEOUT: a hang fails.
if(QMM_DIST_SRC)
  add_executable(tp_mpi tests/mpi/tp_mpi.c)
  target_link_libraries(tp_mpi PRIVATE qmm_testutil)
  set(QMM_TP_ENV "")
  if(MPIEXEC_EXECUTABLE)
    set(QMM_TP_ENV "QMM_MPIEXEC=${MPIEXEC_EXECUTABLE}")
  endif()
  foreach(np 2 3)
    add_test(NAME tp_mpi_np${np}
             COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/tests/mpi/run_mpi.sh ${np} $<TARGET_FILE:tp_mpi>)
    set_tests_properties(tp_mpi_np${np} PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77 ENVIRONMENT "${QMM_TP_ENV}")
  endforeach()
  # the CLI: an MLP split over 2 ranks must print bit-identical: yes (and exit 0)
  add_test(NAME tp_cli_np2
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/tests/mpi/run_mpi.sh 2 $<TARGET_FILE:qmm> tp --layer mlp
                   --M 8 --N 64 --K 64 --F 96 --gs 16 --engine ref --iters 1)
  set_tests_properties(tp_cli_np2 PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77 ENVIRONMENT "${QMM_TP_ENV}"
                       PASS_REGULAR_EXPRESSION "bit-identical: yes")
endif()
