# embed.cmake - embeds the NVRTC kernel sources (kernels/*.cu) as C strings.
#
# Included by the top CMakeLists: defines the static library mt_kernel_sources (only
# when the CUDA backend is built). Run in script mode (cmake -DOUT_DIR=.. -DSRC_DIR=.. -P
# embed.cmake) it writes kernel_sources.c/.h into OUT_DIR; tests/gpu/run.sh and
# bench/cuda/run.sh use that mode on hosts where the full project does not configure.
#
# kernel_sources.h declares, per source kernels/<name>.cu:
#   extern const char krn_src_<name>[];   (NUL-terminated text)

include(${CMAKE_CURRENT_LIST_DIR}/../cmake/embed.cmake)

function(mt_embed_kernel_sources src_dir out_dir)
  file(GLOB cu_files ${src_dir}/*.cu)
  list(SORT cu_files)
  set(pairs "")
  foreach(f ${cu_files})
    get_filename_component(name ${f} NAME_WE)
    list(APPEND pairs krn_src_${name} ${f})
  endforeach()
  mt_embed_files(${out_dir} kernel_sources "the kernel sources in kernels/" ${pairs})
endfunction()

if(CMAKE_SCRIPT_MODE_FILE)
  mt_embed_kernel_sources(${SRC_DIR} ${OUT_DIR})
elseif(MT_HAVE_CUDA)
  set(MT_KSRC_OUT ${CMAKE_BINARY_DIR}/kernels_gen)
  file(GLOB MT_KERNEL_CU CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/*.cu)
  add_custom_command(
    OUTPUT ${MT_KSRC_OUT}/kernel_sources.c ${MT_KSRC_OUT}/kernel_sources.h
    COMMAND ${CMAKE_COMMAND} -DSRC_DIR=${CMAKE_SOURCE_DIR}/kernels -DOUT_DIR=${MT_KSRC_OUT}
            -P ${CMAKE_SOURCE_DIR}/kernels/embed.cmake
    DEPENDS ${MT_KERNEL_CU} ${CMAKE_SOURCE_DIR}/kernels/embed.cmake ${CMAKE_SOURCE_DIR}/cmake/embed.cmake
    COMMENT "embedding kernels/*.cu for NVRTC")
  add_library(mt_kernel_sources STATIC ${MT_KSRC_OUT}/kernel_sources.c)
  target_include_directories(mt_kernel_sources PUBLIC ${MT_KSRC_OUT})
endif()
