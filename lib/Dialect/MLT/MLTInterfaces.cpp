//===- MLTInterfaces.cpp - mlt op interfaces ------------------------------===//
//
// Part of mlt. Generated definitions of the interfaces in MLTInterfaces.td.
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTInterfaces.h"

#include "mlt/Dialect/MLT/MLTInterfaces.cpp.inc"
