final class Pulls {
    static void liteSubscribe() throws Exception { throw new UnsupportedOperationException("liteSubscribe"); }
    static void liteAssign() throws Exception { throw new UnsupportedOperationException("liteAssign"); }
    static void pull() throws Exception { throw new UnsupportedOperationException("pull"); }
}
