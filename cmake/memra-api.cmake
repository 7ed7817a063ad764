# The embedding API's build: libmemra.so (only memra_* exported), the examples, and the install layout
# (headers, libmemra.so + libmemra.a, tools, memra.pc, memraConfig.cmake -> find_package(memra) gives
# memra::memra). Included once from the top-level CMakeLists.txt, after the `memra` static library.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The version in include/memra/memra.h must be the project's.
file(STRINGS ${PROJECT_SOURCE_DIR}/include/memra/memra.h _memra_ver REGEX "#define MEMRA_VERSION_(MAJOR|MINOR|PATCH) ")
string(REGEX REPLACE ".*MAJOR ([0-9]+).*MINOR ([0-9]+).*PATCH ([0-9]+).*" "\\1.\\2.\\3" _memra_ver "${_memra_ver}")
if(NOT _memra_ver STREQUAL PROJECT_VERSION)
  message(FATAL_ERROR "include/memra/memra.h says version ${_memra_ver} but project() says ${PROJECT_VERSION}")
endif()

# ---- libmemra.so: the same sources, hidden visibility; MEMRA_API marks the exports ----
add_library(memra_shared SHARED ${MEMRA_SRC})
set_target_properties(memra_shared PROPERTIES
  OUTPUT_NAME memra
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}
  C_VISIBILITY_PRESET hidden
  CUDA_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON)
target_compile_definitions(memra_shared PRIVATE MEMRA_BUILD_SHARED=1)
target_include_directories(memra_shared
  PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include
  INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:include>)
memra_library_deps(memra_shared PRIVATE)
# Symbols of the static archives linked in (libcudart_static, libculibos, and libstdc++ where a toolchain links
# it statically) stay local: an embedder's own C++ runtime must not meet a second copy of __cxa_* in libmemra.so.
target_link_options(memra_shared PRIVATE -Wl,--exclude-libs,ALL)
if(MEMRA_SANITIZE STREQUAL "")
  target_link_options(memra_shared PRIVATE -Wl,--no-undefined)
endif()

# ---- examples: public header only, linked against the shared library like an embedder ----
foreach(ex simple server)
  add_executable(example-${ex} ${PROJECT_SOURCE_DIR}/examples/${ex}.c)
  target_link_libraries(example-${ex} PRIVATE memra_shared Threads::Threads)
endforeach()

# ---- install ----
install(TARGETS memra ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS memra_shared LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/memra/memra.h ${PROJECT_SOURCE_DIR}/include/memra/status.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/memra)

# What the static archive needs on the link line (the shared library carries its own dependencies).
set(MEMRA_PC_REQUIRES_PRIVATE "liburcu-cds libpcre2-8")
set(MEMRA_STATIC_DEPS "${URCU_LINK_LIBRARIES};${PCRE2_LINK_LIBRARIES}")
if(MEMRA_USE_JEMALLOC)
  string(APPEND MEMRA_PC_REQUIRES_PRIVATE " jemalloc")
  list(APPEND MEMRA_STATIC_DEPS ${JEMALLOC_LINK_LIBRARIES})
endif()
if(CJSON_FOUND)
  string(APPEND MEMRA_PC_REQUIRES_PRIVATE " libcjson")
  list(APPEND MEMRA_STATIC_DEPS ${CJSON_LINK_LIBRARIES})
endif()
if(MEMRA_HAVE_MPI AND OMPI_FOUND)
  string(APPEND MEMRA_PC_REQUIRES_PRIVATE " ompi-c")
  list(APPEND MEMRA_STATIC_DEPS ${OMPI_LINK_LIBRARIES})
elseif(MEMRA_HAVE_MPI)
  list(APPEND MEMRA_STATIC_DEPS ${MPI_C_LIBRARIES})
endif()
set(MEMRA_PC_LIBS_PRIVATE "-lpthread -lm")
if(OpenMP_C_FOUND) # the thread team of a split CPU matmul (MEMRA_CPU_THREADS): the compiler's OpenMP runtime
  string(APPEND MEMRA_PC_LIBS_PRIVATE " ${OpenMP_C_FLAGS}")
  list(APPEND MEMRA_STATIC_DEPS ${OpenMP_C_LIBRARIES})
endif()
if(MEMRA_HAVE_CUDA)
  # the nvcc-compiled objects in libmemra.a also need the C++ runtime (static-local guards and the like)
  string(APPEND MEMRA_PC_LIBS_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart -lcublas -lstdc++")
  list(APPEND MEMRA_STATIC_DEPS ${CUDAToolkit_LIBRARY_DIR}/libcudart.so ${CUDAToolkit_LIBRARY_DIR}/libcublas.so stdc++)
endif()
if(MEMRA_HAVE_NCCL) # the library by its full path: PyPI's wheel ships libnccl.so.2 without the libnccl.so link
  string(APPEND MEMRA_PC_LIBS_PRIVATE " ${MEMRA_NCCL_LIBRARY}")
  list(APPEND MEMRA_STATIC_DEPS ${MEMRA_NCCL_LIBRARY})
endif()
set(MEMRA_STATIC_DEPS_FLAT "${MEMRA_STATIC_DEPS}")
# Relocatable: the prefix is found from the .pc file's own place (pkg-config's ${pcfiledir}).
file(RELATIVE_PATH _memra_pc_up /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
set(MEMRA_PC_PREFIX "\${pcfiledir}/${_memra_pc_up}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/memra.pc.in ${PROJECT_BINARY_DIR}/memra.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/memra.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

set(MEMRA_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/memra)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/memraConfig.cmake.in
  ${PROJECT_BINARY_DIR}/memraConfig.cmake INSTALL_DESTINATION ${MEMRA_CMAKE_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/memraConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/memraConfig.cmake ${PROJECT_BINARY_DIR}/memraConfigVersion.cmake
        DESTINATION ${MEMRA_CMAKE_DIR})
