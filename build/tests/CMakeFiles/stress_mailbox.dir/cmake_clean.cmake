file(REMOVE_RECURSE
  "CMakeFiles/stress_mailbox.dir/stress_mailbox.c.o"
  "CMakeFiles/stress_mailbox.dir/stress_mailbox.c.o.d"
  "stress_mailbox"
  "stress_mailbox.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/stress_mailbox.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
