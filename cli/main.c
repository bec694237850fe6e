#include <stdio.h>
int main(void) { fputs("placeholder\n", stderr); return 1; }
