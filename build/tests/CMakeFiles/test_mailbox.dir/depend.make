# Empty dependencies file for test_mailbox.
# This may be replaced when dependencies are built.
