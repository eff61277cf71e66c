"""The one place the PinLater IDL is loaded.

Everything that needs Thrift types imports them from here, so the IDL is parsed once per process
and every module sees the same classes (thriftpy2 compares struct classes by identity).
"""

from importlib import resources

import thriftpy2

_IDL_FILE = resources.files("pinlater").joinpath("pinlater.thrift")

with resources.as_file(_IDL_FILE) as _path:
    pinlater_thrift = thriftpy2.load(str(_path), module_name="pinlater_thrift")

PinLater = pinlater_thrift.PinLater
PinLaterException = pinlater_thrift.PinLaterException
ErrorCode = pinlater_thrift.ErrorCode
PinLaterJobState = pinlater_thrift.PinLaterJobState
RequestContext = pinlater_thrift.RequestContext
CONTINUATION_START = pinlater_thrift.CONTINUATION_START
CONTINUATION_END = pinlater_thrift.CONTINUATION_END
