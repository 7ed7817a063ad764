
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/wt/actors/actors/actor.c" "CMakeFiles/memra.dir/actors/actor.c.o" "gcc" "CMakeFiles/memra.dir/actors/actor.c.o.d"
  "/work/wt/actors/actors/freelist.c" "CMakeFiles/memra.dir/actors/freelist.c.o" "gcc" "CMakeFiles/memra.dir/actors/freelist.c.o.d"
  "/work/wt/actors/actors/future.c" "CMakeFiles/memra.dir/actors/future.c.o" "gcc" "CMakeFiles/memra.dir/actors/future.c.o.d"
  "/work/wt/actors/actors/mailbox.c" "CMakeFiles/memra.dir/actors/mailbox.c.o" "gcc" "CMakeFiles/memra.dir/actors/mailbox.c.o.d"
  "/work/wt/actors/device/err.c" "CMakeFiles/memra.dir/device/err.c.o" "gcc" "CMakeFiles/memra.dir/device/err.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
