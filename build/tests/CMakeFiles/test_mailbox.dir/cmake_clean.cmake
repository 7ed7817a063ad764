file(REMOVE_RECURSE
  "CMakeFiles/test_mailbox.dir/test_mailbox.c.o"
  "CMakeFiles/test_mailbox.dir/test_mailbox.c.o.d"
  "test_mailbox"
  "test_mailbox.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_mailbox.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
