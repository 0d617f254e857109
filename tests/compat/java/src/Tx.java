final class Tx {
    static void send() throws Exception { throw new UnsupportedOperationException("send"); }
    static void check() throws Exception { throw new UnsupportedOperationException("check"); }
}
