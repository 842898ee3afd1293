# tp.cmake — the tensor-parallel tests (SPEC §6), built only when libqmm has MPI. Each runs under
# `mpirun -np 2` and `-np 3` (oversubscribed, root-safe, loopback only) through
# tests/mpi/run_mpi.sh, which skips (77) when mpirun is missing. TIMEOUT: a hang fails.
if(QMM_TP_SRC)
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
  # W4A8 layers (seeded codes): an MLP pair of 4-bit layers over 2 ranks, a 6-bit row-parallel
  # layer over 3, each bit-identical to one process
  add_test(NAME tp_cli_w4a8_mlp_np2
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/tests/mpi/run_mpi.sh 2 $<TARGET_FILE:qmm> tp --layer mlp --w4a8 4
                   --M 9 --N 64 --K 128 --F 96 --gs 16 --iters 1)
  add_test(NAME tp_cli_w6a8_row_np3
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/tests/mpi/run_mpi.sh 3 $<TARGET_FILE:qmm> tp --layer row --w4a8 6
                   --M 17 --N 48 --K 192 --gs 64 --iters 1)
  set_tests_properties(tp_cli_w4a8_mlp_np2 tp_cli_w6a8_row_np3 PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${QMM_TP_ENV}" PASS_REGULAR_EXPRESSION "W[46]A8 .*bit-identical: yes")
endif()
# Ranks started with different options (mpirun's MPMD form) must all stop with an error naming the
# option and every rank's value, not hang in mismatched collectives: the TIMEOUT fails a hang.
if(QMM_TP_SRC)
  set(QMM_TP_SMALL --layer mlp --M 8 --N 64 --K 64 --F 96 --engine ref)
  # name|option on rank 0|its value|option on rank 1|its value|the option the error must name
  foreach(case "iters|--iters|3|--iters|5|--iters" "M|--M|8|--M|9|--M" "engine|--engine|ref|--engine|avx2_int8|--engine"
               "seed|--seed|1|--seed|2|--seed" "layer|--layer|mlp|--layer|attn|--layer" "w4a8|--w4a8|4|--w4a8|0|--w4a8"
               "usage|--iters|2|--bogus|1|a valid command line")
    string(REPLACE "|" ";" case "${case}")
    list(GET case 0 name)
    list(GET case 1 o0)
    list(GET case 2 v0)
    list(GET case 3 o1)
    list(GET case 4 v1)
    list(GET case 5 want)
    add_test(NAME tp_cli_disagree_${name}
             COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/tests/mpi/run_mpi.sh --mpmd
                     -np 1 $<TARGET_FILE:qmm> tp ${QMM_TP_SMALL} --iters 2 ${o0} ${v0} :
                     -np 1 $<TARGET_FILE:qmm> tp ${QMM_TP_SMALL} --iters 2 ${o1} ${v1})
    set_tests_properties(tp_cli_disagree_${name} PROPERTIES TIMEOUT 30 SKIP_RETURN_CODE 77
                         ENVIRONMENT "${QMM_TP_ENV}" PASS_REGULAR_EXPRESSION "QMM_ERR_DIST: .*ranks disagree on ${want}")
  endforeach()
endif()
# Out-of-range numbers are refused by name (strtoll + range, no signed overflow under UBSan), and a
# seeded layer beyond qmm_weight_create_int8's N*K <= 2^36 is refused before anything is allocated.
if(QMM_TP_SRC)
  foreach(case "hugeK|--K|4611686018427387904|--K 4611686018427387904: needs a whole number"
               "hugeM|--M|99999999999999999999999|--M 99999999999999999999999: needs a whole number"
               "negiters|--iters|-3|--iters -3: needs a whole number" "junkF|--F|12x|--F 12x: needs a whole number"
               "w5a8|--w4a8|5|--w4a8 5: 4 or 6 bits" "w4a8K|--w4a8|6 --K 48|--w4a8 6 needs --K and --F a multiple of 32"
               "bigfc1|--F|1073741824 --K 2147483648|first layer .2147483648, 2147483648. too large")
    string(REPLACE "|" ";" case "${case}")
    list(GET case 0 name)
    list(GET case 1 opt)
    list(GET case 2 val)
    list(GET case 3 want)
    separate_arguments(val)
    add_test(NAME tp_cli_range_${name}
             COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/tests/mpi/run_mpi.sh 2 $<TARGET_FILE:qmm> tp --layer mlp
                     --K 64 --N 16 --F 4 --iters 1 ${opt} ${val})
    set_tests_properties(tp_cli_range_${name} PROPERTIES TIMEOUT 30 SKIP_RETURN_CODE 77
                         ENVIRONMENT "${QMM_TP_ENV}" PASS_REGULAR_EXPRESSION "${want}")
  endforeach()
endif()
