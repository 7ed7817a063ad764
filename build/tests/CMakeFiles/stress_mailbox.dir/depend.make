# Empty dependencies file for stress_mailbox.
# This may be replaced when dependencies are built.
