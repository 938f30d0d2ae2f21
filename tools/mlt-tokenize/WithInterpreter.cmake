# cmake -DSOURCE=script.py -DTARGET=bin/tool -DPYTHON=/path/python3 -P this:
# copies SOURCE to TARGET with PYTHON in its #! line, executable.
file(READ ${SOURCE} text)
string(REGEX REPLACE "^#![^\n]*" "#!${PYTHON}" text "${text}")
file(WRITE ${TARGET}.tmp "${text}")
file(CHMOD ${TARGET}.tmp PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE
     GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
file(RENAME ${TARGET}.tmp ${TARGET})
