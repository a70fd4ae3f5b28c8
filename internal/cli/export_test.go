package cli

// SpelledFFFD is spelledFFFD, for the fuzz targets of package cli_test.
var SpelledFFFD = spelledFFFD
