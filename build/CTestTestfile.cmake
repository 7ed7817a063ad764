# CMake generated Testfile for 
# Source directory: /work/wt/actors
# Build directory: /work/wt/actors/build
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
subdirs("tests")
