/* keeps the helper library non-empty */
int testhelpers_empty_;
