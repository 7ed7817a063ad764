file(REMOVE_RECURSE
  "libmemra.a"
)
