"""The performance model: a roofline of each case from the device's peaks alone (`model`), the model
against published measurements (`published`, the folders' anchors), the `predict` command's table
(`predict`), and from which size on a recipe pays, measured or predicted (`crossover`). Reads the
frame's columns (`suite.analysis.frame`)."""
