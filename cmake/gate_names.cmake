# gate_names.cmake — run at build time (cmake -P): the driver's cu* functions that the toolkit's
# cuda.h declares, minus the door's own entry points (shim/door/table.h's GP_DRIVER_OURS) and
# cuGetProcAddress (ours too), for shim/door/named.c to export a gate stub each. The header is
# read through the preprocessor three times, so the list follows the toolkit:
#   as a program sees it            the names its #defines map to (cuMemAlloc -> cuMemAlloc_v2);
#   CUDA_API_PER_THREAD_DEFAULT_STREAM   the per-thread flavours (_ptds, _ptsz);
#   __CUDA_API_VERSION_INTERNAL     the legacy names older programs bind (cuMemAlloc, cuCtxCreate),
#                                   which the header declares for the driver's own build only.
# cudaProfiler.h adds cuProfilerStart/Stop. Writes OUT_HEADER (an X-macro list, GP_GATE_NAMED)
# and OUT_LIST (one name a line), each only when it changes.
# Arguments: CC, INCLUDES ('|'-separated), TABLE_DIR (shim/door), OUT_HEADER, OUT_LIST, WORK_DIR.
string(REPLACE "|" ";" includes "${INCLUDES}")
set(inc_args "")
foreach(dir IN LISTS includes)
  list(APPEND inc_args "-I${dir}")
endforeach()

file(WRITE "${WORK_DIR}/gate_names_in.c" "#include <cuda.h>\n#include <cudaProfiler.h>\n")
set(names "")
foreach(mode IN ITEMS "" "-DCUDA_API_PER_THREAD_DEFAULT_STREAM" "-D__CUDA_API_VERSION_INTERNAL")
  execute_process(COMMAND ${CC} -E -P ${mode} ${inc_args} "${WORK_DIR}/gate_names_in.c"
                  OUTPUT_VARIABLE text RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "gate_names: preprocessing cuda.h (${mode}) failed: ${err}")
  endif()
  string(REGEX MATCHALL "CUresult[ \t\r\n]+cu[A-Z][A-Za-z0-9_]*[ \t\r\n]*\\(" decls "${text}")
  foreach(d IN LISTS decls)
    string(REGEX REPLACE "^CUresult[ \t\r\n]+(cu[A-Za-z0-9_]+).*" "\\1" n "${d}")
    list(APPEND names ${n})
  endforeach()
endforeach()

# The door's entry points: GP_DRIVER_OURS expanded to one marked name each.
file(WRITE "${WORK_DIR}/gate_names_ours.c" "#include \"table.h\"\n"
  "#define OURS(cls, name, base, version, flavour, params, args, stream) gp_ours_ #name ;\n"
  "GP_DRIVER_OURS(OURS)\n")
execute_process(COMMAND ${CC} -E -P ${inc_args} "-I${TABLE_DIR}" "${WORK_DIR}/gate_names_ours.c"
                OUTPUT_VARIABLE text RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gate_names: preprocessing table.h failed: ${err}")
endif()
# (A string, not cu##name: the pasted name would be expanded by cuda.h's #defines.)
string(REGEX MATCHALL "gp_ours_[ \t]+\"[A-Za-z0-9_]+\"" marks "${text}")
set(ours "")
foreach(m IN LISTS marks)
  string(REGEX REPLACE "^gp_ours_[ \t]+\"([A-Za-z0-9_]+)\"" "cu\\1" n "${m}")
  list(APPEND ours ${n})
endforeach()
list(LENGTH ours n_ours)
if(n_ours LESS 10)
  message(FATAL_ERROR "gate_names: found only ${n_ours} entry points of ours in table.h")
endif()

list(REMOVE_DUPLICATES names)
list(REMOVE_ITEM names ${ours})
list(FILTER names EXCLUDE REGEX "^cuGetProcAddress")
list(SORT names)
list(LENGTH names n)
if(n LESS 100)
  message(FATAL_ERROR "gate_names: found only ${n} driver functions in cuda.h")
endif()

set(header "/* Made by cmake/gate_names.cmake from the toolkit's cuda.h: do not edit. */\n")
string(APPEND header "#define GP_GATE_NAMED(X)")
set(list_text "")
foreach(name IN LISTS names)
  string(APPEND header " \\\n\tX(${name})")
  string(APPEND list_text "${name}\n")
endforeach()
string(APPEND header "\n")

foreach(pair IN ITEMS "OUT_HEADER;header" "OUT_LIST;list_text")
  list(GET pair 0 path_var)
  list(GET pair 1 text_var)
  set(old "")
  if(EXISTS "${${path_var}}")
    file(READ "${${path_var}}" old)
  endif()
  if(NOT old STREQUAL "${${text_var}}")
    file(WRITE "${${path_var}}" "${${text_var}}")
  endif()
endforeach()
