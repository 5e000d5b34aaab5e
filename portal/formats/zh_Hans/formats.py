# Dates on Chinese pages: 2026年12月7日 14:05.
DATETIME_FORMAT = "Y年n月j日 H:i"
SHORT_DATETIME_FORMAT = "Y/m/d H:i"
DATE_FORMAT = "Y年n月j日"
SHORT_DATE_FORMAT = "Y/m/d"
TIME_FORMAT = "H:i:s"
YEAR_MONTH_FORMAT = "Y年n月"
