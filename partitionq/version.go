package partitionq

// Version is the version of this library and of the partitionq command.
const Version = "0.1.0-dev"
