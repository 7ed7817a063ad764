# Empty dependencies file for memra.
# This may be replaced when dependencies are built.
