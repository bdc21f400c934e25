# Helpers for Tandem targets: one function per target kind, so every target gets the same
# warning policy, include root and sanitizer flags.
#
#   tandem_library(NAME <name> SRCS <files...> [DEPS <targets...>] [PURE])
#       PURE marks a `*_core`-style target of pure logic: it may depend only on the standard
#       library, abseil, nlohmann_json, prometheus-cpp's core (in-memory metrics; its pull and push
#       libraries do the I/O) and other PURE Tandem targets (checked at configure time).
#   tandem_executable(NAME <name> SRCS <files...> [DEPS <targets...>])
#   tandem_test(NAME <name> SRCS <files...> [DEPS <targets...>] LABELS <labels...>
#               [TIMEOUT <seconds>] [ARGS <args...>])

# Warnings are always on; they become errors only with TANDEM_WERROR=ON (CI sets it through
# deploy/test.sh), so a user's compiler version with new warnings still builds.
set(TANDEM_WARNINGS -Wall -Wextra -Wno-missing-field-initializers)
set(_tandem_nvcc_werror "")
if(TANDEM_WERROR)
  list(APPEND TANDEM_WARNINGS -Werror)
  set(_tandem_nvcc_werror "--Werror all-warnings")
endif()

if(TANDEM_SANITIZE)
  set(_san -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_compile_options(${_san})
  add_link_options(${_san})
endif()
if(TANDEM_TSAN)
  set(_tsan -fsanitize=thread -fno-omit-frame-pointer)
  add_compile_options(${_tsan})
  add_link_options(${_tsan})
  # Debian's abseil is not built with TSan: common/tsan/ interposes absl::Mutex, CondVar and
  # Notification to report their happens-before edges. Linked into every Tandem executable;
  # -rdynamic exports the definitions so they also replace the library's internal calls.
  add_library(tandem_tsan_absl OBJECT ${PROJECT_SOURCE_DIR}/common/tsan/absl_sync_annotations.cc)
  target_link_libraries(tandem_tsan_absl PUBLIC absl::synchronization absl::time ${CMAKE_DL_LIBS})
  add_link_options(-rdynamic)
endif()
if(TANDEM_FUZZ)
  # Coverage instrumentation for libFuzzer everywhere (-fsanitize=fuzzer-no-link); the fuzz
  # targets themselves link the libFuzzer runtime (tests/fuzz/CMakeLists.txt). Line tables are
  # enough for symbolized reports and keep the build small.
  set(_fuzz -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
            -fno-sanitize-recover=undefined -gline-tables-only)
  add_compile_options(${_fuzz})
  add_link_options(-fsanitize=address,undefined)
endif()
if(TANDEM_NATIVE)
  add_compile_options(-march=native)
endif()

function(_tandem_common target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${TANDEM_WARNINGS}>)
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR})
endfunction()

function(tandem_library)
  cmake_parse_arguments(ARG "PURE" "NAME" "SRCS;DEPS" ${ARGN})
  add_library(${ARG_NAME} STATIC ${ARG_SRCS})
  _tandem_common(${ARG_NAME})
  target_link_libraries(${ARG_NAME} PUBLIC ${ARG_DEPS})
  if(ARG_PURE)
    set_target_properties(${ARG_NAME} PROPERTIES TANDEM_PURE ON)
    # tests/lint checks that these sources (and their headers) include no I/O library.
    foreach(src IN LISTS ARG_SRCS)
      get_filename_component(abs ${src} ABSOLUTE)
      set_property(GLOBAL APPEND PROPERTY TANDEM_PURE_SOURCES "${ARG_NAME}:${abs}")
    endforeach()
    foreach(dep IN LISTS ARG_DEPS)
      if(dep MATCHES "^absl::" OR dep STREQUAL "Threads::Threads" OR
         dep STREQUAL "nlohmann_json::nlohmann_json" OR  # header-only JSON, no I/O
         dep STREQUAL "prometheus-cpp::core")  # metric values and text serializer, no I/O
        continue()
      endif()
      if(NOT TARGET ${dep})
        message(FATAL_ERROR "${ARG_NAME} is PURE but depends on unknown target ${dep}")
      endif()
      get_target_property(dep_pure ${dep} TANDEM_PURE)
      if(NOT dep_pure)
        message(FATAL_ERROR "${ARG_NAME} is PURE (std + abseil only) but depends on ${dep}")
      endif()
    endforeach()
  endif()
endfunction()

function(tandem_executable)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  _tandem_common(${ARG_NAME})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS})
  if(TANDEM_TSAN)
    target_link_libraries(${ARG_NAME} PRIVATE tandem_tsan_absl)
  endif()
endfunction()

function(tandem_test)
  cmake_parse_arguments(ARG "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS;ARGS" ${ARGN})
  if(NOT ARG_LABELS)
    message(FATAL_ERROR "tandem_test(${ARG_NAME}) needs LABELS (unit, integration, e2e, cuda, model)")
  endif()
  add_executable(${ARG_NAME} ${ARG_SRCS})
  _tandem_common(${ARG_NAME})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  if(TANDEM_TSAN)
    target_link_libraries(${ARG_NAME} PRIVATE tandem_tsan_absl)
  endif()
  add_test(NAME ${ARG_NAME} COMMAND ${ARG_NAME} ${ARG_ARGS})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  set_tests_properties(${ARG_NAME} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT})
  # A test that needs the real model reads its path from TANDEM_MODEL (deploy/test.sh sets it).
  if("model" IN_LIST ARG_LABELS)
    set_tests_properties(${ARG_NAME} PROPERTIES SKIP_RETURN_CODE 77)
  endif()
endfunction()

# tandem_forced_isa_tests(<test> LABELS <labels...> [ARGS <args...>] [TIMEOUT <s>]): runs the
# already defined test binary <test> again as <test>_avx2 and <test>_portable, with
# TANDEM_CPU_ISA forcing that CPU kernel path (tests/forced_isa.sh; skipped where the CPU lacks
# it). The same binary: no extra build time.
function(tandem_forced_isa_tests test)
  cmake_parse_arguments(ARG "" "TIMEOUT" "LABELS;ARGS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  foreach(isa avx2 portable)
    add_test(NAME ${test}_${isa}
             COMMAND ${PROJECT_SOURCE_DIR}/tests/forced_isa.sh ${isa} $<TARGET_FILE:${test}> ${ARG_ARGS})
    set_tests_properties(${test}_${isa} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
                         SKIP_RETURN_CODE 77)
  endforeach()
endfunction()

# Warning policy for a target with .cu sources: the host compiler gets the same warnings as the
# rest of Tandem, and with TANDEM_WERROR nvcc's and the host compiler's warnings are errors.
function(tandem_cuda_target target)
  list(JOIN TANDEM_WARNINGS "," _host_warnings)
  target_compile_options(${target} PRIVATE
    "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:-Xcompiler ${_host_warnings}>")
  if(TANDEM_WERROR)
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:${_tandem_nvcc_werror}>")
  endif()
endfunction()

# For targets that use std::regex (test checks only). GCC 12 at -O2 with -fsanitize=address
# reports -Wmaybe-uninitialized inside libstdc++'s regex automaton (the std::function members of
# its state copies), not in Tandem's code; the warning stays on everywhere else and in every other
# build, where it does not fire.
function(tandem_uses_std_regex)
  if(TANDEM_SANITIZE AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    foreach(target ${ARGN})
      target_compile_options(${target} PRIVATE -Wno-maybe-uninitialized)
    endforeach()
  endif()
endfunction()
