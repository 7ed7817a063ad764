file(REMOVE_RECURSE
  "CMakeFiles/memra.dir/actors/actor.c.o"
  "CMakeFiles/memra.dir/actors/actor.c.o.d"
  "CMakeFiles/memra.dir/actors/freelist.c.o"
  "CMakeFiles/memra.dir/actors/freelist.c.o.d"
  "CMakeFiles/memra.dir/actors/future.c.o"
  "CMakeFiles/memra.dir/actors/future.c.o.d"
  "CMakeFiles/memra.dir/actors/mailbox.c.o"
  "CMakeFiles/memra.dir/actors/mailbox.c.o.d"
  "CMakeFiles/memra.dir/device/err.c.o"
  "CMakeFiles/memra.dir/device/err.c.o.d"
  "libmemra.a"
  "libmemra.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/memra.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
