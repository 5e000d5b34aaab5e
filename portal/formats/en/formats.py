# Dates on English pages: ISO order, 24-hour clock (what the pages showed before there were two languages).
DATETIME_FORMAT = "Y-m-d H:i"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
YEAR_MONTH_FORMAT = "F Y"
