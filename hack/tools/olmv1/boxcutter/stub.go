package boxcutter
