/* layer_main.c - the empty program each library is linked into, alone with
 * the libraries it may use (tests/meson.build): linking fails on any symbol
 * it takes from another layer. */
int main(void)
{
    return 0;
}
